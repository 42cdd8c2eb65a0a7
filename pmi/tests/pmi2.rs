//! The PMI-2 client against a PMI-2 server written here from the protocol (MPICH's
//! `pmi2` documentation, Slurm's `mpi/pmi2`): ranks as threads, each with its end of a socket
//! pair, the server a thread per rank over shared job state — so every test is deterministic
//! and needs no launcher. What a real launcher says is checked under Slurm's `srun --mpi=pmi2`
//! by the test suite's Slurm tests.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex};

use pmi::wire::{Command, Decoder};
use pmi::{wire2, Client, Version};

/// One job's state, shared by the server's threads.
#[derive(Default)]
struct Job {
    kvs: BTreeMap<String, String>,
    /// Ranks in the current fence, and fences completed.
    fencing: u32,
    fences: u64,
    aborted: Option<String>,
    finalized: u32,
}

struct Server {
    size: u32,
    mapping: String,
    job: Mutex<Job>,
    fenced: Condvar,
}

impl Server {
    /// Serves one rank's connection until it finalizes or closes.
    fn serve(&self, mut conn: UnixStream, rank: u32) {
        let mut buf = [0u8; 4096];
        // The PMI-1 line that announces the version.
        let mut d1 = Decoder::new();
        let init = loop {
            if let Some(m) = d1.next_message() {
                break m.expect("a PMI-1 init line");
            }
            let n = conn.read(&mut buf).expect("read");
            assert!(n > 0, "closed before init");
            d1.push(&buf[..n]);
        };
        assert_eq!(init.name(), "init");
        assert_eq!(init.get("pmi_version"), Some("2"));
        let ok = Command::new("response_to_init")
            .with("pmi_version", "2")
            .with("pmi_subversion", "0")
            .with("rc", "0");
        conn.write_all(ok.to_wire().unwrap().as_bytes()).unwrap();
        let mut d2 = wire2::Decoder::new();
        loop {
            let cmd = match d2.next_message() {
                Some(m) => m.expect("a well-formed PMI-2 message"),
                None => {
                    let n = conn.read(&mut buf).expect("read");
                    if n == 0 {
                        return;
                    }
                    d2.push(&buf[..n]);
                    continue;
                }
            };
            let reply = match cmd.name() {
                "fullinit" => {
                    assert_eq!(cmd.get("pmirank"), Some(rank.to_string().as_str()));
                    Command::new("fullinit-response")
                        .with("rc", "0")
                        .with("pmi-version", "2")
                        .with("pmi-subversion", "0")
                        .with("rank", rank.to_string())
                        .with("size", self.size.to_string())
                        .with("appnum", "0")
                        .with("debugged", "FALSE")
                        .with("pmiverbose", "FALSE")
                }
                "job-getid" => Command::new("job-getid-response")
                    .with("rc", "0")
                    .with("jobid", "job;7"),
                "info-getjobattr" => {
                    let r = Command::new("info-getjobattr-response").with("rc", "0");
                    match cmd.get("key") {
                        Some("PMI_process_mapping") => {
                            r.with("found", "TRUE").with("value", self.mapping.clone())
                        }
                        _ => r.with("found", "FALSE"),
                    }
                }
                "kvs-put" => {
                    let mut job = self.job.lock().unwrap();
                    job.kvs.insert(
                        cmd.get("key").unwrap().to_owned(),
                        cmd.get("value").unwrap().to_owned(),
                    );
                    Command::new("kvs-put-response").with("rc", "0")
                }
                "kvs-fence" => {
                    let mut job = self.job.lock().unwrap();
                    let round = job.fences;
                    job.fencing += 1;
                    if job.fencing == self.size {
                        job.fencing = 0;
                        job.fences += 1;
                        self.fenced.notify_all();
                    } else {
                        while job.fences == round {
                            job = self.fenced.wait(job).unwrap();
                        }
                    }
                    Command::new("kvs-fence-response").with("rc", "0")
                }
                "kvs-get" => {
                    assert_eq!(cmd.get("jobid"), Some("job;7"), "the job id, ; and all");
                    let job = self.job.lock().unwrap();
                    match job.kvs.get(cmd.get("key").unwrap()) {
                        Some(v) => Command::new("kvs-get-response")
                            .with("rc", "0")
                            .with("found", "TRUE")
                            .with("value", v.clone()),
                        None => Command::new("kvs-get-response")
                            .with("rc", "0")
                            .with("found", "FALSE"),
                    }
                }
                "abort" => {
                    self.job.lock().unwrap().aborted = cmd.get("msg").map(str::to_owned);
                    return;
                }
                "finalize" => {
                    self.job.lock().unwrap().finalized += 1;
                    let r = Command::new("finalize-response").with("rc", "0");
                    conn.write_all(&wire2::encode(&r).unwrap()).unwrap();
                    return;
                }
                other => Command::new(format!("{other}-response"))
                    .with("rc", "-1")
                    .with("errmsg", "unknown command"),
            };
            conn.write_all(&wire2::encode(&reply).unwrap()).unwrap();
        }
    }
}

/// Runs `body` as each of `size` ranks, each a client in PMI-2 mode over its own connection.
fn job<R: Send>(size: u32, body: impl Fn(Client) -> R + Sync) -> (Vec<R>, Arc<Server>) {
    let server = Arc::new(Server {
        size,
        mapping: format!("(vector,(0,{},2))", size.div_ceil(2)),
        job: Mutex::new(Job::default()),
        fenced: Condvar::new(),
    });
    let results = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..size)
            .map(|rank| {
                let (mine, theirs) = UnixStream::pair().unwrap();
                let server = server.clone();
                s.spawn(move || server.serve(theirs, rank));
                let body = &body;
                s.spawn(move || {
                    let client = Client::over_stream(mine, Some(rank), None)
                        .unwrap()
                        .speaking(Version::Two, Some("job;7".into()));
                    body(client)
                })
            })
            .collect();
        ranks.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (results, server)
}

#[test]
fn ranks_exchange_cards_through_a_pmi2_server() {
    let (cards, server) = job(4, |mut c| {
        c.init().unwrap();
        assert_eq!(c.version(), Version::Two);
        assert_eq!(c.size(), 4);
        let me = c.rank();
        c.put_bytes(&format!("card-{me}"), &[me as u8; 40]).unwrap();
        c.barrier().unwrap();
        let peer = (me + 1) % 4;
        let got = c.get_bytes(&format!("card-{peer}")).unwrap();
        assert_eq!(c.get("nobody-put-this").unwrap(), None);
        let nodes = c.node_ids().unwrap().expect("the launcher's mapping");
        c.finalize().unwrap();
        (got, nodes)
    });
    for (rank, (card, nodes)) in cards.iter().enumerate() {
        assert_eq!(card.as_deref(), Some(&[((rank + 1) % 4) as u8; 40][..]));
        assert_eq!(nodes, &[0, 0, 1, 1], "(vector,(0,2,2)): nodes of two");
    }
    assert_eq!(server.job.lock().unwrap().finalized, 4);
}

#[test]
fn a_job_id_with_a_semicolon_travels_escaped() {
    let (_, server) = job(2, |mut c| {
        c.init().unwrap();
        assert_eq!(c.get_my_kvsname().unwrap(), "job;7");
        c.barrier().unwrap();
        c.finalize().unwrap();
    });
    assert_eq!(server.job.lock().unwrap().fences, 1);
}

#[test]
fn abort_reaches_the_server_with_its_message() {
    let (_, server) = job(1, |mut c| {
        c.init().unwrap();
        c.send_abort(3, "out of cheese").unwrap();
    });
    assert_eq!(
        server.job.lock().unwrap().aborted.as_deref(),
        Some("out_of_cheese")
    );
}

#[test]
fn a_refusal_is_an_error_naming_the_server_message() {
    // A server that answers init with rc=-1 (a PMI-1 only launcher).
    let (mine, mut theirs) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        let _ = theirs.read(&mut buf).unwrap();
        let no = Command::new("response_to_init")
            .with("pmi_version", "1")
            .with("pmi_subversion", "1")
            .with("rc", "-1")
            .with("msg", "unsupported_PMI_version");
        theirs.write_all(no.to_wire().unwrap().as_bytes()).unwrap();
    });
    let mut c = Client::over_stream(mine, Some(0), Some(1))
        .unwrap()
        .speaking(Version::Two, None);
    let e = c.init().unwrap_err();
    assert!(e.to_string().contains("PMI 2.0"), "{e}");
    assert!(e.to_string().contains("unsupported_PMI_version"), "{e}");
    t.join().unwrap();
}
