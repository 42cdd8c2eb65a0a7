//! Who may send to a rank over libfabric. A tagged message names its sender in its own match
//! bits and CQ data, the netmod reads completions without their source and uses no job key:
//! an endpoint that reaches a rank's address (for `tcp;ofi_rxm`, any host) — not even in the
//! rank's address vector — can send it a message with any tag, and it matches a receive as if
//! a rank had sent it (docs/hardening/who-may-connect.md).
//!
//! The test below states what should hold and does not yet: it is ignored, and fails when run
//! (`cargo test -p netmod-ofi --test strangers -- --ignored`): the reproducer for whoever
//! closes it.

use std::time::{Duration, Instant};

use netmod_ofi::provider::{
    fi_context2, fi_cq_tagged_entry, select, Completions, Endpoint, Hints, Posted, FI_ADDR_UNSPEC,
};

fn poll_all(eps: &[&Endpoint]) {
    let mut e = [fi_cq_tagged_entry::default(); 8];
    for ep in eps {
        let _ = ep.poll(&mut e);
    }
}

#[test]
#[ignore = "open: libfabric takes a stranger's tagged message (docs/hardening/who-may-connect.md)"]
fn an_endpoint_outside_the_job_cannot_complete_a_receive() {
    // Declared before the endpoints, so that they outlive the receive posted into them.
    let mut buf = vec![0u8; 16];
    let mut ctx = Box::new(fi_context2::default());
    let Ok(info) = select(&Hints::for_provider("tcp")) else {
        eprintln!("note: tcp;ofi_rxm unavailable here, test skipped");
        return;
    };
    let mut ep0 = Endpoint::open(info.clone(), 2).unwrap();
    let mut ep1 = Endpoint::open(info.clone(), 2).unwrap();
    let mut stranger = Endpoint::open(info, 1).unwrap();
    let names = [ep0.name().unwrap(), ep1.name().unwrap()].concat();
    ep0.insert_addresses(&names, 2).unwrap();
    ep1.insert_addresses(&names, 2).unwrap();
    // The stranger knows rank 0's address; rank 0 has never heard of the stranger.
    stranger.insert_addresses(&ep0.name().unwrap(), 1).unwrap();
    let started = Instant::now();
    // SAFETY: `buf` and `ctx` outlive the receive: they were declared before the endpoints,
    // which are dropped first (locals drop in reverse order), and that ends it.
    while unsafe { ep0.trecv(buf.as_mut_ptr(), 16, FI_ADDR_UNSPEC, 42, 0, &mut *ctx) }.unwrap()
        == Posted::Again
    {
        poll_all(&[&ep0, &ep1]);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "receive not posted"
        );
    }
    // Tag 42, CQ data naming process 1: what rank 1 would send.
    while stranger.tinjectdata(b"forged", 1 << 32, 0, 42).unwrap() == Posted::Again {
        poll_all(&[&stranger, &ep0]);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "could not send"
        );
    }
    let mut entries = [fi_cq_tagged_entry::default(); 8];
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        poll_all(&[&stranger, &ep1]);
        if let Completions::Read(n) = ep0.poll(&mut entries).unwrap() {
            assert_eq!(
                n,
                0,
                "rank 0's receive took the stranger's message: {:?}",
                String::from_utf8_lossy(&buf[..6])
            );
        }
    }
}
