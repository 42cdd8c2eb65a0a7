//! One binary, several networks: with more than one of the `tcp`, `ofi` and `ucx` features,
//! `CH4_NETMOD` chooses the netmod when the job starts. Every netmod built in carries a job of
//! processes, each its own node, with the job's tag limit its own; `auto` takes the first that
//! opens; a name this build lacks is refused with the choices.
#![cfg(any(
    all(feature = "tcp", feature = "ofi"),
    all(feature = "tcp", feature = "ucx"),
    all(feature = "ofi", feature = "ucx")
))]

mod common;

use common::jobs::{as_rank, built, finished, succeeded, test_as_ranks};
use std::process::Command;

/// The netmods of this build, in `auto`'s order, with the largest tag each carries.
fn built_in() -> Vec<(&'static str, ch4::Tag)> {
    let mut v = Vec::new();
    if cfg!(feature = "ofi") {
        v.push(("ofi", (1 << 24) - 1));
    }
    if cfg!(feature = "ucx") {
        v.push(("ucx", (1 << 24) - 1));
    }
    if cfg!(feature = "tcp") {
        v.push(("tcp", ch4::TAG_UB));
    }
    v
}

#[test]
fn every_netmod_built_in_carries_a_job_chosen_at_start() {
    let mut choices: Vec<(&str, ch4::Tag)> = built_in();
    // `auto`: the first of the build's that opens (libfabric and UCX open here).
    choices.push(("auto", built_in()[0].1));
    for (name, tag_ub) in choices {
        let ub = tag_ub.to_string();
        let child = test_as_ranks(
            "rank",
            4,
            &[
                ("CH4_NETMOD", name),
                ("CH4_NODE_SIZE", "1"),
                ("CH4_DEBUG_SUMMARY", "1"),
                ("EXP_TAG_UB", &ub),
            ],
        );
        let out = finished(child, &format!("CH4_NETMOD={name}"));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let stdout = succeeded(out);
        let passed = stdout
            .lines()
            .filter(|l| l.starts_with("test result: ok. 1 passed"))
            .count();
        assert_eq!(passed, 4, "CH4_NETMOD={name}: every rank passes:\n{stdout}");
        let chosen = if name == "auto" {
            format!("{} (auto)", built_in()[0].0)
        } else {
            format!("{name} (CH4_NETMOD)")
        };
        assert!(
            stdout
                .lines()
                .chain(stderr.lines())
                .any(|l| l.starts_with("CH4_NETMOD") && l.contains(&chosen)),
            "the summary names the netmod chosen ({chosen}):\n{stdout}\n{stderr}"
        );
    }
}

/// One rank of the jobs above: the limit the job reports is the network's, a message with
/// that tag goes around the ring, and one above it is refused with a tag error.
#[test]
#[ignore = "one rank of a process job: every_netmod_built_in_carries_a_job_chosen_at_start starts it"]
fn rank() {
    as_rank(|ctx| {
        let expected: ch4::Tag = std::env::var("EXP_TAG_UB")
            .expect("EXP_TAG_UB")
            .parse()
            .expect("a tag");
        let world = ctx.world();
        assert_eq!(ctx.tag_ub()?, expected);
        assert_eq!(world.tag_ub()?, expected);
        let (rank, size) = (world.rank(), world.size());
        let mut got = [0i32];
        ctx.scope(|s| {
            let r = world.irecv(s, &mut got, (rank + size - 1) % size, expected)?;
            world.send(&[rank], (rank + 1) % size, expected)?;
            r.wait().map(drop)
        })?;
        assert_eq!(got[0], (rank + size - 1) % size);
        if expected < ch4::TAG_UB {
            let e = world
                .send(&[0u8], (rank + 1) % size, expected + 1)
                .unwrap_err();
            assert_eq!(e.kind(), ch4::ErrorKind::Tag, "{e}");
        }
        world.barrier()
    });
}

#[test]
fn a_netmod_this_build_lacks_is_refused_with_the_choices() {
    let dir = built();
    for bad in ["bogus", "verbs"] {
        let out = Command::new(dir.join("ch4run"))
            .args(["-n", "2"])
            .arg(dir.join("examples/ring"))
            .env("CH4_NETMOD", bad)
            .env("CH4_NODE_SIZE", "1")
            .output()
            .unwrap();
        assert!(!out.status.success(), "CH4_NETMOD={bad} ran");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("CH4_NETMOD"), "{stderr}");
        for (name, _) in built_in() {
            assert!(stderr.contains(name), "the choices list {name}: {stderr}");
        }
    }
}
