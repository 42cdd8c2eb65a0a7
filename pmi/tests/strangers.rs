//! Who may join a ch4run job: a process of any user of the host can reach the port ch4run
//! serves PMI on with `--pmi-port` (127.0.0.1); only the ranks, which were given their
//! `PMI_ID` in an environment no other user can read, get in. A stray process that connects
//! and speaks PMI is refused and the job goes on, and so is a rank of another job pointed at
//! this job's port; no refusal names an id.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{drain, wait_for, CH4RUN, HELLO};

/// Sends `line` on a fresh connection to `port` and returns every line until it is closed.
fn speak(port: &str, line: &str) -> Vec<String> {
    let mut s = TcpStream::connect(port).expect("connect to ch4run's PMI port");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(line.as_bytes()).unwrap();
    BufReader::new(s).lines().map_while(|l| l.ok()).collect()
}

#[test]
fn a_stray_process_on_the_pmi_port_is_refused_and_the_job_goes_on() {
    // Each rank says where the port is and its id, waits while the stranger tries, then joins.
    let mut cmd = Command::new(CH4RUN);
    cmd.args(["-n", "2", "-l", "--pmi-port", "--", "sh", "-c"])
        .arg(format!(
            "echo \"port $PMI_PORT id $PMI_ID\"; sleep 2; exec {HELLO} --expect-size 2"
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
        cmd.env_remove(v);
    }
    let mut child = cmd.spawn().expect("start ch4run");
    let err = drain(child.stderr.take().unwrap());
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "no port line");
        let words: Vec<&str> = line.split_whitespace().collect();
        if let [_, "port", port, "id", id] = words[..] {
            seen.push((port.to_owned(), id.to_owned()));
        }
    }
    let port = seen[0].0.clone();
    let ids: Vec<String> = seen.iter().map(|(_, id)| id.clone()).collect();
    assert_ne!(ids[0], ids[1]);
    assert!(
        !ids.iter().any(|id| id == "0" || id == "1"),
        "ids are not the ranks"
    );
    // What a stray process might try, before the ranks join.
    for line in [
        "cmd=get_my_kvsname\n",
        "cmd=get kvsname=kvs_1_0 key=ch4-job-key\n",
        "cmd=abort exitcode=7\n",
        "cmd=initack pmiid=0\n",
        "cmd=initack pmiid=1\n",
        "garbage\n",
    ] {
        let reply = speak(&port, line);
        assert_eq!(reply.len(), 1, "{line:?}: {reply:?}");
        assert!(reply[0].contains("rc=-1"), "{line:?}: {reply:?}");
    }
    // A rank of another job (ch4run --pmi-port too, its own PMI_ID) sent to this job's port:
    // refused, so that job fails, saying why, and this one goes on.
    let mut other = Command::new(CH4RUN);
    other
        .args(["-n", "1", "--pmi-port", "--", "sh", "-c"])
        .arg(format!("PMI_PORT={port} exec {HELLO}"));
    for v in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
        other.env_remove(v);
    }
    let other = other.output().expect("run the other job");
    let other_err = String::from_utf8_lossy(&other.stderr);
    assert!(!other.status.success(), "{other_err}");
    assert!(other_err.contains("pmiid"), "{other_err}");
    // One that says nothing at all while the job runs.
    let _silent = TcpStream::connect(&port).unwrap();
    let status = wait_for(&mut child, Duration::from_secs(30));
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    let stderr = err.join().unwrap();
    assert!(status.success(), "{rest}\n{stderr}");
    assert_eq!(rest.matches(": ok").count(), 2, "{rest}");
    assert_eq!(
        stderr.matches("refused a PMI connection").count(),
        7,
        "{stderr}"
    );
    for id in &ids {
        assert!(!stderr.contains(id.as_str()), "an id in the log: {stderr}");
    }
}

/// A program a rank starts does not inherit the rank's PMI socket: it could otherwise speak PMI
/// as that rank (its `PMI_FD` now names no open descriptor, a clear error).
#[test]
fn a_ranks_children_do_not_inherit_its_pmi_socket() {
    let r = common::run(
        common::ch4run(&["-n", "2"], &["--child-sees-pmi-fd"]),
        Duration::from_secs(30),
    );
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.stdout.matches("child has no PMI socket").count(),
        2,
        "{}",
        r.stdout
    );
}
