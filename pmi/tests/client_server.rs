//! The client against the server over real sockets: socketpairs as ch4run makes them
//! (`PMI_FD`), and TCP as `PMI_PORT` uses; malformed input from a peer in both directions.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::thread;
use std::time::{Duration, Instant};

use pmi::{Client, Command, ConnectionKind, ErrorKind, JobConfig, JobEvent, SocketServer};

/// Serves until `done` says so, failing the test instead of hanging.
fn serve_until(
    server: &mut SocketServer,
    mut done: impl FnMut(&[JobEvent]) -> bool,
) -> Vec<JobEvent> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut events = Vec::new();
    while !done(&events) {
        assert!(
            Instant::now() < deadline,
            "server timed out; events so far: {events:?}"
        );
        events.extend(server.poll(Duration::from_millis(10)));
    }
    events
}

fn count_finalized(events: &[JobEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, JobEvent::Finalized { .. }))
        .count()
}

/// What every rank does: publish a card, fence, read everyone's, check locality, leave.
fn rank_main(mut c: Client) -> Result<(), pmi::Error> {
    c.init()?;
    let (rank, size) = (c.rank(), c.size());
    assert!(rank < size);
    assert!(c.get_my_kvsname()?.starts_with("kvs_"));
    assert_eq!(c.get_maxes()?.vallen_max, 1024);
    assert_eq!(c.get_universe_size()?, Some(size));
    assert_eq!(c.get_appnum()?, 0);
    c.put(
        &format!("card-{rank}"),
        &format!("tcp://10.0.0.{rank}:99=x"),
    )?;
    c.put_bytes(&format!("bin-{rank}"), &[rank as u8, 0, 255, b' '])?;
    c.barrier()?;
    for peer in 0..size {
        let card = c.get(&format!("card-{peer}"))?;
        assert_eq!(card, Some(format!("tcp://10.0.0.{peer}:99=x")));
        let bin = c.get_bytes(&format!("bin-{peer}"))?;
        assert_eq!(bin, Some(vec![peer as u8, 0, 255, b' ']));
    }
    assert_eq!(c.get("never-put")?, None);
    assert_eq!(c.node_ids()?, Some(vec![0; size as usize]));
    c.barrier()?;
    c.finalize()
}

#[test]
fn four_ranks_over_socketpairs() {
    const N: u32 = 4;
    let mut server = SocketServer::new(JobConfig::single_node(N)).unwrap();
    let mut ranks = Vec::new();
    for rank in 0..N {
        let (ours, theirs) = UnixStream::pair().unwrap();
        server.add_unix(ours, Some(rank)).unwrap();
        let client = Client::over_stream(theirs, Some(rank), Some(N)).unwrap();
        assert_eq!(client.connection_kind(), ConnectionKind::Fd);
        ranks.push(thread::spawn(move || rank_main(client)));
    }
    serve_until(&mut server, |ev| count_finalized(ev) == N as usize);
    for r in ranks {
        r.join().unwrap().unwrap();
    }
}

#[test]
fn rank_and_size_from_the_server_when_the_launch_does_not_say() {
    let mut server = SocketServer::new(JobConfig::single_node(2)).unwrap();
    let mut ranks = Vec::new();
    for rank in 0..2 {
        let (ours, theirs) = UnixStream::pair().unwrap();
        server.add_unix(ours, Some(rank)).unwrap();
        let client = Client::over_stream(theirs, None, None).unwrap();
        ranks.push(thread::spawn(move || rank_main(client)));
    }
    serve_until(&mut server, |ev| count_finalized(ev) == 2);
    for r in ranks {
        r.join().unwrap().unwrap();
    }
}

#[test]
fn three_ranks_over_pmi_port_with_initack() {
    const N: u32 = 3;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut server = SocketServer::new(JobConfig::single_node(N)).unwrap();
    server.listen(listener).unwrap();
    let ranks: Vec<_> = (0..N)
        .map(|rank| {
            let addr = addr.clone();
            thread::spawn(move || {
                let client = Client::connect_port(&addr, Some(rank))?;
                assert_eq!(client.connection_kind(), ConnectionKind::Port);
                assert_eq!((client.rank(), client.size()), (rank, N));
                rank_main(client)
            })
        })
        .collect();
    serve_until(&mut server, |ev| count_finalized(ev) == N as usize);
    for r in ranks {
        r.join().unwrap().unwrap();
    }
}

/// Sends raw bytes as a misbehaving client would and returns the reply line.
fn raw_exchange(
    stream: &mut BufReader<UnixStream>,
    server: &mut SocketServer,
    bytes: &[u8],
) -> String {
    stream.get_mut().write_all(bytes).unwrap();
    stream
        .get_ref()
        .set_read_timeout(Some(Duration::from_millis(10)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut line = String::new();
    loop {
        server.poll(Duration::from_millis(10));
        match stream.read_line(&mut line) {
            Ok(_) if line.ends_with('\n') => return line,
            _ => assert!(Instant::now() < deadline, "no reply to {bytes:?}"),
        }
    }
}

#[test]
fn malformed_lines_get_an_error_reply_and_the_connection_survives() {
    let mut server = SocketServer::new(JobConfig::single_node(1)).unwrap();
    let (ours, theirs) = UnixStream::pair().unwrap();
    server.add_unix(ours, Some(0)).unwrap();
    let mut s = BufReader::new(theirs);

    for bad in [
        &b"this is not pmi\n"[..],
        b"cmd=put key\n",
        b"cmd=a cmd=b\n",
        b"cmd=get key=\xff\xfe\n",
        b"cmd=frobnicate\n",
    ] {
        let reply = raw_exchange(&mut s, &mut server, bad);
        let reply = Command::parse(reply.as_bytes()).unwrap();
        assert_eq!(reply.name(), "error", "{bad:?}");
        assert_eq!(reply.get("rc"), Some("-1"));
        assert!(!reply.get("msg").unwrap_or("").is_empty());
    }

    // An endless line is reported as soon as it passes the limit, not when it ends.
    let reply = raw_exchange(&mut s, &mut server, &[b'x'; 3000]);
    assert!(
        reply.contains("rc=-1") && reply.contains("exceeds"),
        "{reply}"
    );
    let reply = raw_exchange(&mut s, &mut server, b"xxx\ncmd=get_maxes\n");
    assert!(reply.starts_with("cmd=maxes "), "{reply}");

    // spawn, in its multi-line form, is refused as a whole.
    let reply = raw_exchange(
        &mut s,
        &mut server,
        b"mcmd=spawn\nnprocs=1\nexecname=/bin/true\narg1=a b\nendcmd\n",
    );
    assert!(reply.starts_with("cmd=spawn_result rc=-1"), "{reply}");

    // Still a working connection.
    let reply = raw_exchange(
        &mut s,
        &mut server,
        b"cmd=init pmi_version=1 pmi_subversion=1\n",
    );
    assert!(reply.contains("rc=0"), "{reply}");
}

#[test]
fn a_malformed_reply_is_a_clear_client_error() {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let fake = thread::spawn(move || {
        let mut ours = ours;
        let mut buf = [0u8; 256];
        let _ = ours.read(&mut buf).unwrap();
        ours.write_all(b"cmd=response_to_init rc=0 \x00garbage\n")
            .unwrap();
        // Hold the connection open: the client must fail on the bytes, not on EOF.
        thread::sleep(Duration::from_millis(300));
    });
    let mut c = Client::over_stream(theirs, Some(0), Some(1)).unwrap();
    let err = c.init().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Wire);
    assert!(err.to_string().contains("control character"), "{err}");
    fake.join().unwrap();
}

#[test]
fn abort_is_reported_with_rank_and_code() {
    let mut server = SocketServer::new(JobConfig::single_node(2)).unwrap();
    let (ours, theirs) = UnixStream::pair().unwrap();
    server.add_unix(ours, Some(1)).unwrap();
    let t = thread::spawn(move || {
        let mut c = Client::over_stream(theirs, Some(1), Some(2)).unwrap();
        c.init().unwrap();
        c.send_abort(7, "disk on fire").unwrap();
        c
    });
    let events = serve_until(&mut server, |ev| {
        ev.iter().any(|e| matches!(e, JobEvent::Abort { .. }))
    });
    assert!(events.contains(&JobEvent::Abort {
        rank: Some(1),
        code: 7,
        message: Some("disk_on_fire".into())
    }));
    drop(t.join().unwrap());
}

#[test]
fn a_rank_that_leaves_mid_job_fails_the_barrier_instead_of_hanging_it() {
    let mut server = SocketServer::new(JobConfig::single_node(2)).unwrap();
    let (ours0, theirs0) = UnixStream::pair().unwrap();
    let (ours1, theirs1) = UnixStream::pair().unwrap();
    server.add_unix(ours0, Some(0)).unwrap();
    server.add_unix(ours1, Some(1)).unwrap();
    let waiter = thread::spawn(move || {
        let mut c = Client::over_stream(theirs0, Some(0), Some(2)).unwrap();
        c.init().unwrap();
        c.barrier()
    });
    let leaver = thread::spawn(move || {
        let mut c = Client::over_stream(theirs1, Some(1), Some(2)).unwrap();
        c.init().unwrap();
        drop(c);
    });
    let events = serve_until(&mut server, |ev| {
        ev.iter().any(|e| matches!(e, JobEvent::Failed { .. }))
    });
    leaver.join().unwrap();
    let failed = events
        .iter()
        .find_map(|e| match e {
            JobEvent::Failed { message } => Some(message.clone()),
            _ => None,
        })
        .unwrap();
    assert!(failed.contains("rank 1"), "{failed}");
    // The launcher would now kill rank 0; dropping the server closes its socket instead.
    drop(server);
    let err = waiter.join().unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
}
