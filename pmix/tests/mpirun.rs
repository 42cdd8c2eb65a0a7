//! The client under a real PMIx server: the test runs itself as three processes under Open
//! MPI's `mpirun` (which hosts one), and each checks rank and size, a ring of put, fence and
//! get, a value nobody put, the keys PMIx refuses, the node map, and failure registration.
//! Skipped, with a note, where `mpirun.openmpi` is not installed.

use std::process::Command;

/// Set in the processes `mpirun` starts, so that they run the body instead of launching.
const CHILD_VAR: &str = "PMIX_CRATE_TEST_CHILD";

/// Runs `name` (a test of this file) as `n` processes under `mpirun`; their stdout.
fn under_mpirun(name: &str, n: u32) -> Option<String> {
    if !testkit::skip::on_path(
        "mpirun.openmpi",
        &format!("pmix: {name}"),
        "apt-get install openmpi-bin",
    ) {
        return None;
    }
    let out = Command::new("mpirun.openmpi")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            &n.to_string(),
        ])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, "1")
        .output()
        .expect("run mpirun");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(stdout)
}

#[test]
fn three_ranks_exchange_cards_in_a_ring_and_see_one_node() {
    let name = "three_ranks_exchange_cards_in_a_ring_and_see_one_node";
    if std::env::var_os(CHILD_VAR).is_none() {
        if let Some(out) = under_mpirun(name, 3) {
            assert_eq!(out.matches("rank ok").count(), 3, "{out}");
        }
        return;
    }
    assert!(pmix::launched());
    let mut pmix = pmix::Client::init().expect("PMIx_Init under mpirun");
    let (rank, size) = (pmix.rank(), pmix.size());
    assert_eq!(size, 3);
    assert!(!pmix.namespace().is_empty());

    // Values of any bytes, NULs included, and one large enough for PMI-1 to cut in pieces.
    let card = |r: u32| {
        let mut v = vec![0u8, 1, 2, r as u8];
        v.extend(std::iter::repeat(r as u8).take(64 * 1024));
        v
    };
    pmix.put("card", &card(rank)).unwrap();
    pmix.put("empty", b"").unwrap();
    pmix.fence().unwrap();
    let next = (rank + 1) % size;
    assert_eq!(pmix.get(next, "card").unwrap(), Some(card(next)));
    assert_eq!(pmix.get(rank, "card").unwrap(), Some(card(rank)));
    assert_eq!(pmix.get(next, "empty").unwrap(), Some(Vec::new()));
    assert_eq!(pmix.get(next, "nobody-put-this").unwrap(), None);

    // Bad input is an error value, never a panic.
    assert!(pmix.get(size, "card").is_err());
    assert!(pmix.put("pmix.rank", b"x").is_err());
    assert!(pmix.put("nul\0key", b"x").is_err());
    assert!(pmix.put(&"k".repeat(600), b"x").is_err());

    let nodes = pmix.node_ids().unwrap().expect("mpirun gives a node map");
    assert_eq!(nodes, vec![0, 0, 0]);
    assert_eq!(pmix.local_rank().unwrap(), Some(rank));
    // Open MPI's server takes event registrations.
    assert!(pmix.watch_failures().unwrap());
    assert!(pmix.poll_peer_events().is_empty());
    pmix.fence().unwrap();
    pmix.finalize().unwrap();
    println!("rank ok");
}
