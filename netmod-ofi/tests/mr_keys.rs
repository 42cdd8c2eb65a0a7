//! Who may read a large message's memory: a large message is sent by registering the
//! sender's buffer for remote reads, and libfabric's providers let whoever names the region's
//! key read it — a process that reaches the endpoint (for `tcp;ofi_rxm`, any host) needs
//! nothing else. Where the netmod chooses keys (no `FI_MR_PROV_KEY`: `tcp;ofi_rxm` and `shm`
//! here), they must not be guessable: a reader that knows one key, or counts from 1, must not
//! find another region.
//!
//! A provider that is not installed is skipped with a note on stderr.

use std::time::{Duration, Instant};

use netmod_ofi::provider::{
    fi_context2, fi_cq_tagged_entry, select, Completions, Endpoint, Hints, Posted,
};

/// Two endpoints that know each other, or `None` (after a note) without the provider.
fn pair(provider: &str) -> Option<[Endpoint; 2]> {
    let info = match select(&Hints::for_provider(provider)) {
        Ok(info) => info,
        Err(e) if e.detail().contains("not available") => {
            eprintln!("SKIP: {}", e.detail());
            return None;
        }
        Err(e) => panic!("select({provider}): {e:?}"),
    };
    let mut ep = [
        Endpoint::open(info.clone(), 2).expect("open endpoint 0"),
        Endpoint::open(info, 2).expect("open endpoint 1"),
    ];
    let names = [ep[0].name().unwrap(), ep[1].name().unwrap()].concat();
    for e in &mut ep {
        assert_eq!(e.insert_addresses(&names, 2).unwrap(), [0, 1]);
    }
    Some(ep)
}

/// Endpoint 1 reads `len` bytes of endpoint 0's memory at `addr` with `key`: the bytes, or
/// `None` when the read fails.
fn read(ep: &[Endpoint; 2], len: usize, addr: u64, key: u64) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut ctx = Box::new(fi_context2::default());
    let started = Instant::now();
    loop {
        // SAFETY: `buf` and `ctx` live until the read completes below (or the test fails,
        // which ends the process's use of both endpoints).
        let posted = unsafe { ep[1].read(buf.as_mut_ptr(), len, 0, addr, key, &mut *ctx) };
        match posted {
            Ok(Posted::Again) => {}
            Ok(_) => break,
            Err(_) => return None,
        }
        drive(ep);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "read not posted"
        );
    }
    let want = &mut *ctx as *mut fi_context2;
    let mut entries = [fi_cq_tagged_entry::default(); 8];
    loop {
        let _ = ep[0].poll(&mut entries);
        match ep[1].poll(&mut entries).expect("poll") {
            Completions::Read(n) => {
                if entries[..n].iter().any(|e| e.op_context.cast() == want) {
                    return Some(buf);
                }
            }
            Completions::Failed(e) if e.op_context == want => return None,
            Completions::Failed(_) => {}
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "read never completed"
        );
    }
}

fn drive(ep: &[Endpoint; 2]) {
    let mut entries = [fi_cq_tagged_entry::default(); 8];
    for e in ep {
        let _ = e.poll(&mut entries);
    }
}

/// Registers two regions on endpoint 0; endpoint 1 reads both with their keys. Their keys are
/// not a count (one from the other, or from 1). With `try_guesses`, endpoint 1 then tries the
/// keys a reader who knows region A's would try on region B, and every read fails.
fn keys_cannot_be_guessed(provider: &str, try_guesses: bool) {
    let Some(ep) = pair(provider) else { return };
    if let Some(why) = ep[0].rma_unusable() {
        eprintln!("SKIP: {provider}: {why}");
        return;
    }
    let a = vec![0xAAu8; 4096];
    let b = vec![0xBBu8; 4096];
    // SAFETY: `a` and `b` outlive their regions (deregistered below).
    let (ra, rb) = unsafe {
        (
            ep[0].register(a.as_ptr(), a.len()).unwrap(),
            ep[0].register(b.as_ptr(), b.len()).unwrap(),
        )
    };
    let guesses = [ra.key.wrapping_add(1), ra.key.wrapping_sub(1), 0, 1, 2, 3];
    assert!(
        !guesses.contains(&rb.key) && !guesses.contains(&ra.key),
        "{provider}: keys {} and {} are a count",
        ra.key,
        rb.key
    );
    // The owner's peer, with the keys, reads both.
    assert_eq!(read(&ep, 64, ra.addr, ra.key).as_deref(), Some(&a[..64]));
    assert_eq!(read(&ep, 64, rb.addr, rb.key).as_deref(), Some(&b[..64]));
    if try_guesses {
        for guess in guesses {
            assert_eq!(
                read(&ep, 64, rb.addr, guess),
                None,
                "{provider}: key {guess}"
            );
        }
    }
    ep[0].deregister(ra);
    ep[0].deregister(rb);
}

#[test]
fn tcp_region_keys_cannot_be_guessed() {
    keys_cannot_be_guessed("tcp", true);
}

#[test]
fn shm_region_keys_cannot_be_guessed() {
    // shm 1.17 never completes a read with a key it does not know: no guesses there.
    keys_cannot_be_guessed("shm", false);
}
