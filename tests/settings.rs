//! Settings: every `CH4_*` variable is honoured alike by ranks as threads and as processes,
//! builder methods override it, a value that does not parse or a variable that is no setting
//! stops the start with an error naming it, and the settings in force can be printed.
//!
//! The environment is shared by the threads of this test binary, so every test that sets a
//! variable holds `ENV` while it runs.

mod common;

use std::sync::Mutex;

use ch4::threads::Threads;

static ENV: Mutex<()> = Mutex::new(());

/// Runs `f` with `vars` set, then removes them.
fn with_env<R>(vars: &[(&str, &str)], f: impl FnOnce() -> R) -> R {
    let _guard = ENV.lock().unwrap_or_else(|p| p.into_inner());
    for (k, v) in vars {
        std::env::set_var(k, v);
    }
    let r = f();
    for (k, _) in vars {
        std::env::remove_var(k);
    }
    r
}

/// The value in force of `name` on every rank of a thread job.
fn in_force(threads: Threads, name: &'static str) -> Vec<String> {
    threads
        .run(move |ctx| {
            let summary = ctx.settings()?;
            Ok(summary
                .get(name)
                .expect("a setting of this build")
                .value
                .clone())
        })
        .unwrap()
}

#[test]
fn thread_ranks_honour_the_environment_and_the_builder_overrides_it() {
    with_env(
        &[
            ("CH4_SHM_EAGER_LIMIT", "1K"),
            ("CH4_SHM_PIECE_SIZE", "8192"),
        ],
        || {
            assert_eq!(
                in_force(Threads::new(2), "CH4_SHM_EAGER_LIMIT"),
                ["1024", "1024"]
            );
            assert_eq!(
                in_force(Threads::new(2), "CH4_SHM_PIECE_SIZE"),
                ["8192", "8192"]
            );
            let overridden = Threads::new(2).eager_limit(100);
            assert_eq!(in_force(overridden, "CH4_SHM_EAGER_LIMIT"), ["100", "100"]);
        },
    );
    // Without the variables: the defaults, the same as process mode's.
    let _guard = ENV.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(
        in_force(Threads::new(2), "CH4_SHM_EAGER_LIMIT"),
        ["32768", "32768"]
    );
    // The TCP netmod carries the network traffic only when no other netmod is built in.
    #[cfg(all(feature = "tcp", not(any(feature = "ofi", feature = "ucx"))))]
    {
        let tcp = Threads::new(2).ranks_per_node(1);
        assert_eq!(in_force(tcp, "CH4_TCP_EAGER_LIMIT"), ["65536", "65536"]);
    }
}

#[test]
fn a_value_that_does_not_parse_stops_a_thread_job() {
    // The TCP netmod reads its settings only when it carries the network traffic: when no
    // other netmod is built in.
    let tcp_netmod = cfg!(all(
        feature = "tcp",
        not(any(feature = "ofi", feature = "ucx"))
    ));
    let tcp_only = [("CH4_TCP_PIECE_SIZE", "1.5M")];
    for (var, value) in tcp_only.into_iter().filter(|_| tcp_netmod).chain([
        ("CH4_SHM_EAGER_LIMIT", "abc"),
        ("CH4_SHM_CMA", "maybe"),
        ("CH4_SHM_RING_SIZE", "3000"),
        ("CH4_NODE_SIZE", "0"),
        ("CH4_LOG", "[["),
    ]) {
        let e = with_env(&[(var, value)], || {
            // One rank per node puts the TCP netmod to work.
            let per_node = if tcp_netmod { 1 } else { 2 };
            Threads::new(2)
                .ranks_per_node(per_node)
                .run(|_| Ok(()))
                .unwrap_err()
        });
        assert_eq!(e.kind(), ch4::ErrorKind::Arg, "{var}: {e}");
        assert!(e.to_string().contains(&format!("{var}={value:?}")), "{e}");
    }
}

#[test]
fn a_misspelt_setting_is_an_error_that_names_the_right_one() {
    let e = with_env(&[("CH4_SHM_EAGERLIMIT", "100")], || {
        Threads::new(2).run(|_| Ok(())).unwrap_err()
    });
    assert!(
        e.to_string().contains(
            "CH4_SHM_EAGERLIMIT is not a ch4 setting (did you mean CH4_SHM_EAGER_LIMIT?)"
        ),
        "{e}"
    );
}

/// Runs the `ring` example on `ranks` processes under `ch4run` with `env` added; returns
/// whether it succeeded and its standard error.
fn ring(ranks: &str, env: &[(&str, &str)]) -> (bool, String) {
    let dir = common::jobs::built();
    let out = std::process::Command::new(dir.join("ch4run"))
        .args(["-n", ranks])
        .arg(dir.join("examples/ring"))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The line of the settings summary in `stderr` that starts with `name`.
fn summary_line<'a>(stderr: &'a str, name: &str) -> &'a str {
    stderr
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("{stderr}"))
}

#[test]
fn processes_honour_the_same_settings_and_print_them_on_request() {
    let (ok, stderr) = ring(
        "2",
        &[("CH4_SHM_EAGER_LIMIT", "1K"), ("CH4_DEBUG_SUMMARY", "1")],
    );
    assert!(ok, "{stderr}");
    assert_eq!(
        stderr.matches("# ch4 settings in force").count(),
        1,
        "rank 0 only: {stderr}"
    );
    let line = summary_line(&stderr, "CH4_SHM_EAGER_LIMIT");
    assert!(
        line.contains("1024") && line.contains("environment: 1K"),
        "{line}"
    );

    let (ok, stderr) = ring("2", &[("CH4_SHM_EAGER_LIMIT", "abc")]);
    assert!(!ok);
    assert!(
        stderr.contains("CH4_SHM_EAGER_LIMIT=\"abc\" is not valid"),
        "{stderr}"
    );
}

/// The ranks that share a host's CPUs are counted as such when `CH4_NODE_SIZE` splits the host
/// into nodes (every rank its own node here): three ranks, not one, decide how soon a waiting
/// loop yields, and the summary says so.
#[cfg(any(feature = "tcp", feature = "ofi", feature = "ucx"))]
#[test]
fn the_idle_policy_counts_the_ranks_of_the_host_not_of_the_node() {
    let (ok, stderr) = ring("3", &[("CH4_NODE_SIZE", "1"), ("CH4_DEBUG_SUMMARY", "1")]);
    assert!(ok, "{stderr}");
    let line = summary_line(&stderr, "CH4_YIELD");
    assert!(line.contains("auto: "), "{line}");
    assert!(line.contains("(3 ranks on this host's"), "{line}");
}

#[cfg(all(feature = "tcp", not(any(feature = "ofi", feature = "ucx"))))]
#[test]
fn ch4_log_shows_events_without_code() {
    // rank 1 exits without finalizing: rank 0's TCP netmod warns of the broken connection.
    let child = common::jobs::test_as_ranks(
        "log_rank",
        2,
        &[("CH4_NODE_SIZE", "1"), ("CH4_LOG", "netmod_tcp=debug")],
    );
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("netmod_tcp"), "{stderr}");
    assert!(stderr.contains("connection"), "{stderr}");
}

/// One rank of `ch4_log_shows_events_without_code`.
#[test]
#[ignore = "one rank of a process job"]
fn log_rank() {
    let universe = ch4::process::init().expect("join");
    let w = universe.world();
    w.barrier().unwrap();
    if w.rank() == 1 {
        std::process::exit(0);
    }
    let _ = w.recv(&mut [0u8], 1, 0);
}

#[cfg(feature = "tcp")]
#[test]
fn node_size_splits_a_thread_job_as_it_splits_a_process_job() {
    use ch4::Shm;
    let local = |threads: Threads| {
        threads
            .run(|ctx| {
                let peer = 1 - ctx.world().rank() as u32;
                Ok(ctx.device()?.shm().is_local(peer))
            })
            .unwrap()
    };
    with_env(&[("CH4_NODE_SIZE", "1")], || {
        assert_eq!(local(Threads::new(2)), [false, false], "one rank per node");
        let overridden = Threads::new(2).ranks_per_node(2);
        assert_eq!(local(overridden), [true, true], "the builder wins");
    });
    let _guard = ENV.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(local(Threads::new(2)), [true, true], "one node by default");
}
