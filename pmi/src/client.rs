//! The PMI client (PMI-1, and PMI-2 where the launcher speaks it): how a process learns its
//! rank and exchanges business cards.
//!
//! A process started by a PMI-1 launcher (ch4run, or MPICH's Hydra `mpiexec` on any number of
//! hosts) finds its connection to the process manager in the environment, as MPICH's
//! `simple_pmi.c` does:
//!
//! * `PMI_FD`: an inherited, already-connected socket. Rank and size come from `PMI_RANK` and
//!   `PMI_SIZE`. This is what Hydra and ch4run use by default.
//! * `PMI_PORT=host:port`: connect there, then, if `PMI_ID` is set, run the `initack`
//!   handshake, whose `cmd=set` replies carry size and rank. Hydra uses this with `-pmi-port`.
//! * Neither: the process is a *singleton*, rank 0 of 1, with a private in-memory key-value
//!   space, so a program started without any launcher still runs.
//!
//! A launcher that also sets `PMI_JOBID` speaks PMI-2 (Slurm's `srun --mpi=pmi2`): the client
//! then announces version 2 in its `init` line and speaks [`wire2`]'s length-prefixed messages
//! from there on (`fullinit`, `job-getid`, `kvs-put`, `kvs-fence`, `kvs-get`,
//! `info-getjobattr` for `PMI_process_mapping`, `finalize`, `abort`), behind the same methods.
//!
//! The client is blocking and strictly request/reply, like the C client: one outstanding
//! request at a time, which is all PMI-1 allows. Everything a process manager sends back is
//! checked; an `rc` other than 0 becomes an [`ErrorKind::Server`] error carrying the server's
//! message, and a reply to the wrong question an [`ErrorKind::Protocol`] error.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::hex;
use crate::mapping::{ProcessMapping, PROCESS_MAPPING_KEY};
use crate::server::{sanitize_msg, PMI_SUBVERSION, PMI_VERSION};
use crate::wire::{Command, Decoder, MAX_KEY_LEN, MAX_KVSNAME_LEN, MAX_VALUE_LEN};
use crate::wire2;

/// Set by ch4run for its ranks: this process manager answers `watch_peers` (see
/// [`Client::watch_peers`]). Hydra does not, and is never asked.
pub const PEER_EVENTS_VAR: &str = "PMI_CH4_PEER_EVENTS";

/// What the process manager said about another rank (see [`Client::watch_peers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerEvent {
    /// The rank finalized: it left the job in order.
    Left(u32),
    /// The rank's connection ended without finalize: it died or exited without leaving.
    Failed(u32),
}

/// How long to keep trying to reach a `PMI_PORT` address.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The size limits a process manager advertises in answer to `get_maxes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Maxes {
    /// Longest key-value-space name, in bytes.
    pub kvsname_max: usize,
    /// Longest key, in bytes.
    pub keylen_max: usize,
    /// Longest value, in bytes.
    pub vallen_max: usize,
}

impl Maxes {
    /// Hydra's limits, which a singleton also enforces so that a program that works alone
    /// does not break when launched.
    pub const HYDRA: Maxes = Maxes {
        kvsname_max: MAX_KVSNAME_LEN,
        keylen_max: MAX_KEY_LEN,
        vallen_max: MAX_VALUE_LEN,
    };
}

/// How the client reaches its process manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectionKind {
    /// An inherited socket (`PMI_FD`) or a stream handed to [`Client::over_stream`].
    Fd,
    /// A TCP connection to `PMI_PORT`.
    Port,
    /// No process manager: rank 0 of 1.
    Singleton,
}

/// Anything the client can talk PMI over.
trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// Which protocol the client speaks, and so how it frames messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// PMI-1: one line a message (ch4run, Hydra).
    One,
    /// PMI-2: length-prefixed `cmd=...;key=value;` messages (Slurm's `--mpi=pmi2`, Hydra's
    /// `-pmi-version 2`), after a PMI-1 `init` line that announces it.
    Two,
}

/// The message decoder of either protocol.
enum Framing {
    One(Decoder),
    Two(wire2::Decoder),
}

impl Framing {
    fn push(&mut self, bytes: &[u8]) {
        match self {
            Framing::One(d) => d.push(bytes),
            Framing::Two(d) => d.push(bytes),
        }
    }

    fn next_message(&mut self) -> Option<std::result::Result<Command, crate::wire::WireError>> {
        match self {
            Framing::One(d) => d.next_message(),
            Framing::Two(d) => d.next_message(),
        }
    }
}

enum Conn {
    Singleton {
        kvs: BTreeMap<String, String>,
    },
    Stream {
        io: Box<dyn Stream>,
        decoder: Framing,
        /// The descriptor under `io`, when known, to look for unasked lines without blocking.
        fd: Option<RawFd>,
    },
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Connected,
    Initialized,
    Finalized,
}

/// A connection to a PMI-1 process manager. See the [module docs](self).
///
/// Dropping a client closes the connection without `finalize`; a launcher may treat that as a
/// failed rank, so call [`finalize`](Client::finalize) on the way out.
pub struct Client {
    conn: Conn,
    kind: ConnectionKind,
    rank: Option<u32>,
    size: Option<u32>,
    debug: bool,
    state: State,
    kvsname: Option<String>,
    maxes: Maxes,
    /// Whether the launcher answers `watch_peers` (ch4run sets [`PEER_EVENTS_VAR`]).
    events_offered: bool,
    /// Peer events read but not yet returned by [`Client::poll_peer_events`].
    events: Vec<PeerEvent>,
    /// The protocol spoken (PMI-2's framing starts after `init`).
    version: Version,
    /// PMI-2: the job id `PMI_JOBID` names (sent in `fullinit`), and the appnum `fullinit`
    /// answered.
    jobid: Option<String>,
    appnum: i32,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("kind", &self.kind)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("state", &self.state)
            .field("kvsname", &self.kvsname)
            .finish_non_exhaustive()
    }
}

/// Set once a client has taken `PMI_FD`: two clients on one connection would interleave
/// requests and read each other's replies.
static PMI_FD_TAKEN: AtomicBool = AtomicBool::new(false);

impl Client {
    /// Connects as the environment says (see the [module docs](self)); a process with no PMI
    /// variables becomes a singleton. Call [`init`](Client::init) next.
    pub fn from_env() -> Result<Client> {
        Self::from_vars(|k| std::env::var(k).ok(), true)
    }

    /// [`from_env`](Client::from_env) with the environment given as a lookup function, so tests
    /// can describe a launch without mutating the process environment. `allow_fd` = false
    /// refuses `PMI_FD` (only the real environment may hand this process a descriptor).
    fn from_vars(get: impl Fn(&str) -> Option<String>, allow_fd: bool) -> Result<Client> {
        let env_u32 = |name: &str| -> Result<Option<u32>> {
            match get(name) {
                None => Ok(None),
                Some(v) => v.trim().parse::<u32>().map(Some).map_err(|_| {
                    Error::new(
                        ErrorKind::Environment,
                        format!("{name}={v:?} is not a non-negative integer"),
                    )
                }),
            }
        };
        if let Some(fd) = get("PMI_FD") {
            if !allow_fd {
                return Err(Error::new(
                    ErrorKind::Environment,
                    "PMI_FD is only accepted from the process environment",
                ));
            }
            let fd: RawFd = fd
                .trim()
                .parse()
                .ok()
                .filter(|&fd| fd >= 0)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Environment,
                        format!("PMI_FD={fd:?} is not a file descriptor number"),
                    )
                })?;
            let stream = File::from(take_inherited_fd(fd)?);
            let raw = stream.as_raw_fd();
            let mut client =
                Client::over_stream(stream, env_u32("PMI_RANK")?, env_u32("PMI_SIZE")?)?;
            client.set_fd(raw);
            client.debug = env_u32("PMI_DEBUG")?.is_some_and(|d| d != 0);
            client.events_offered = get(PEER_EVENTS_VAR).is_some_and(|v| v.trim() == "1");
            client.jobid = get("PMI_JOBID");
            client.version = version_of(&get);
            return Ok(client);
        }
        if let Some(port) = get("PMI_PORT") {
            let version = version_of(&get);
            // PMI-1's `initack` handshake does not exist in PMI-2 (`fullinit` names the rank).
            let pmi_id = match version {
                Version::One => env_u32("PMI_ID")?,
                Version::Two => None,
            };
            let mut client = Client::connect_port(&port, pmi_id)?;
            client.jobid = get("PMI_JOBID");
            client.version = version;
            // Without the handshake, rank and size come from the environment, as in simple_pmi.
            client.rank = client.rank.or(env_u32("PMI_RANK")?);
            client.size = client.size.or(env_u32("PMI_SIZE")?);
            client.events_offered = get(PEER_EVENTS_VAR).is_some_and(|v| v.trim() == "1");
            return Ok(client);
        }
        Ok(Client::singleton())
    }

    /// A client with no process manager: rank 0 of 1 and a private key-value space.
    pub fn singleton() -> Client {
        Client {
            conn: Conn::Singleton {
                kvs: BTreeMap::from([(
                    PROCESS_MAPPING_KEY.to_owned(),
                    ProcessMapping::single_node(1).to_string(),
                )]),
            },
            kind: ConnectionKind::Singleton,
            rank: Some(0),
            size: Some(1),
            debug: false,
            state: State::Connected,
            kvsname: None,
            maxes: Maxes::HYDRA,
            events_offered: false,
            events: Vec::new(),
            version: Version::One,
            jobid: None,
            appnum: 0,
        }
    }

    /// A client over an already-connected stream, as if inherited through `PMI_FD`. `rank` and
    /// `size` are what the launcher said in `PMI_RANK` / `PMI_SIZE`; if `None`, [`init`] asks
    /// the server with `get_rank` / `get_size` (which ch4run answers and Hydra does not).
    ///
    /// [`init`]: Client::init
    pub fn over_stream<S>(stream: S, rank: Option<u32>, size: Option<u32>) -> Result<Client>
    where
        S: Read + Write + Send + 'static,
    {
        Ok(Client {
            conn: Conn::Stream {
                io: Box::new(stream),
                decoder: Framing::One(Decoder::new()),
                fd: None,
            },
            kind: ConnectionKind::Fd,
            rank,
            size,
            debug: false,
            state: State::Connected,
            kvsname: None,
            maxes: Maxes::HYDRA,
            events_offered: false,
            events: Vec::new(),
            version: Version::One,
            jobid: None,
            appnum: 0,
        })
    }

    /// Records the descriptor under the stream, for [`poll_peer_events`](Client::poll_peer_events).
    fn set_fd(&mut self, raw: RawFd) {
        if let Conn::Stream { fd, .. } = &mut self.conn {
            *fd = Some(raw);
        }
    }

    /// Connects to a process manager listening at `host:port` (the `PMI_PORT` format; IPv6
    /// hosts in brackets). With `pmi_id`, runs the `initack` handshake, which tells the client
    /// its rank and the job size.
    pub fn connect_port(addr: &str, pmi_id: Option<u32>) -> Result<Client> {
        let (host, port) = split_host_port(addr)?;
        let addrs = (host, port)
            .to_socket_addrs()
            .map_err(|e| Error::io(format!("resolving PMI_PORT host {host:?}"), e))?;
        let mut last_err = None;
        let mut stream = None;
        for sa in addrs {
            match TcpStream::connect_timeout(&sa, CONNECT_TIMEOUT) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        let stream = match (stream, last_err) {
            (Some(s), _) => s,
            (None, Some(e)) => return Err(Error::io(format!("connecting to PMI_PORT {addr}"), e)),
            (None, None) => {
                return Err(Error::new(
                    ErrorKind::Environment,
                    format!("PMI_PORT host {host:?} resolves to no address"),
                ))
            }
        };
        stream
            .set_nodelay(true)
            .map_err(|e| Error::io("setting TCP_NODELAY on the PMI connection", e))?;
        let raw = stream.as_raw_fd();
        let mut client = Client::over_stream(stream, None, None)?;
        client.set_fd(raw);
        client.kind = ConnectionKind::Port;
        if let Some(id) = pmi_id {
            client.initack(id)?;
        }
        Ok(client)
    }

    /// The `PMI_PORT` handshake: `cmd=initack pmiid=N`, answered by `cmd=initack` and three
    /// `cmd=set` lines carrying size, rank and debug (accepted in any order).
    fn initack(&mut self, id: u32) -> Result<()> {
        let ack = self.exchange(
            Command::new("initack").with("pmiid", id.to_string()),
            "initack",
        )?;
        check_rc(&ack, "initack")?;
        let (mut size, mut rank, mut debug) = (None, None, None);
        while size.is_none() || rank.is_none() || debug.is_none() {
            let set = self.recv("initack")?;
            if set.name() != "set" {
                return Err(Error::new(
                    ErrorKind::Protocol,
                    format!(
                        "expected cmd=set during the initack handshake, got cmd={}",
                        set.name()
                    ),
                ));
            }
            if let Some(v) = set.get("size") {
                size = Some(parse_num::<u32>(v, "size")?);
            } else if let Some(v) = set.get("rank") {
                rank = Some(parse_num::<u32>(v, "rank")?);
            } else if let Some(v) = set.get("debug") {
                debug = Some(parse_num::<i64>(v, "debug")? != 0);
            } else {
                return Err(Error::new(
                    ErrorKind::Protocol,
                    "cmd=set without size, rank or debug during the initack handshake",
                ));
            }
        }
        self.size = size;
        self.rank = rank;
        self.debug = debug.unwrap_or(false);
        Ok(())
    }

    /// Joins the job: `cmd=init pmi_version=1 pmi_subversion=1` (the server must answer rc=0),
    /// then fetches and caches the limits, the key-value-space name and, if the launch did not
    /// say, rank and size.
    pub fn init(&mut self) -> Result<()> {
        if self.state != State::Connected {
            return Err(Error::new(ErrorKind::State, "init called twice"));
        }
        if let Conn::Singleton { .. } = self.conn {
            self.kvsname = Some(format!("singinit_kvs_{}_0", std::process::id()));
            self.state = State::Initialized;
            return Ok(());
        }
        if self.version == Version::Two {
            return self.init_v2();
        }
        self.announce(PMI_VERSION, PMI_SUBVERSION)?;
        self.state = State::Initialized;
        self.maxes = self.get_maxes()?;
        let name = self.exchange(Command::new("get_my_kvsname"), "my_kvsname")?;
        let kvsname = name
            .get("kvsname")
            .ok_or_else(|| missing("my_kvsname", "kvsname"))?;
        self.kvsname = Some(kvsname.to_owned());
        if self.size.is_none() {
            let r = self.exchange(Command::new("get_size"), "size")?;
            check_rc(&r, "get_size")?;
            self.size = Some(parse_num(r.get("size").unwrap_or(""), "size")?);
        }
        if self.rank.is_none() {
            let r = self.exchange(Command::new("get_rank"), "rank")?;
            check_rc(&r, "get_rank")?;
            self.rank = Some(parse_num(r.get("rank").unwrap_or(""), "rank")?);
        }
        match (self.rank, self.size) {
            (Some(rank), Some(size)) if rank < size => Ok(()),
            (rank, size) => Err(Error::new(
                ErrorKind::Environment,
                format!("rank {rank:?} is not below size {size:?}"),
            )),
        }
    }

    /// The `init` line both protocols start with: the version this client speaks, which the
    /// server must accept (rc=0).
    fn announce(&mut self, version: u32, subversion: u32) -> Result<()> {
        let reply = self.exchange(
            Command::new("init")
                .with("pmi_version", version.to_string())
                .with("pmi_subversion", subversion.to_string()),
            "response_to_init",
        )?;
        check_rc(&reply, "init").map_err(|e| {
            Error::new(
                e.kind(),
                format!(
                    "{} (client speaks PMI {version}.{subversion}, server {}.{})",
                    e.detail(),
                    reply.get("pmi_version").unwrap_or("?"),
                    reply.get("pmi_subversion").unwrap_or("?")
                ),
            )
        })
    }

    /// PMI-2's start: the version announced in a PMI-1 `init` line, then `fullinit` (this
    /// rank, from `PMI_RANK`, and the job id, from `PMI_JOBID`, when the launcher gave one),
    /// whose reply says rank, size and appnum, then `job-getid`, the key-value space's name.
    fn init_v2(&mut self) -> Result<()> {
        self.announce(2, 0)?;
        if let Conn::Stream { decoder, .. } = &mut self.conn {
            *decoder = Framing::Two(wire2::Decoder::new());
        }
        let rank = self.rank.ok_or_else(|| {
            Error::new(
                ErrorKind::Environment,
                "PMI-2 needs this rank from the launcher (PMI_RANK)",
            )
        })?;
        let mut full = Command::new("fullinit");
        if let Some(jobid) = &self.jobid {
            full.push("pmijobid", jobid.clone());
        }
        full.push("pmirank", rank.to_string());
        full.push("threaded", "FALSE");
        let r = self.exchange(full, "fullinit-response")?;
        check_rc(&r, "fullinit")?;
        let field = |key: &str| parse_num::<i64>(r.get(key).unwrap_or(""), key);
        let (rank, size) = (field("rank")?, field("size")?);
        self.rank = u32::try_from(rank).ok();
        self.size = u32::try_from(size).ok();
        self.appnum = r.get("appnum").map_or(Ok(0), |v| parse_num(v, "appnum"))?;
        self.debug = r.get("debugged") == Some("TRUE");
        let id = self.exchange(Command::new("job-getid"), "job-getid-response")?;
        check_rc(&id, "job-getid")?;
        let jobid = id
            .get("jobid")
            .ok_or_else(|| missing("job-getid-response", "jobid"))?;
        self.kvsname = Some(jobid.to_owned());
        self.maxes = Maxes {
            kvsname_max: MAX_KVSNAME_LEN,
            keylen_max: MAX_KEY_LEN,
            vallen_max: wire2::MAX_VALUE_LEN,
        };
        self.state = State::Initialized;
        match (self.rank, self.size) {
            (Some(rank), Some(size)) if rank < size => Ok(()),
            _ => Err(Error::new(
                ErrorKind::Protocol,
                format!("fullinit answered rank {rank} of size {size}"),
            )),
        }
    }

    /// A PMI-2 job attribute (`info-getjobattr`): `None` when the launcher has none by that
    /// name.
    fn job_attr(&mut self, key: &str) -> Result<Option<String>> {
        let r = self.exchange(
            Command::new("info-getjobattr").with("key", key),
            "info-getjobattr-response",
        )?;
        check_rc(&r, "info-getjobattr")?;
        Ok((r.get("found") == Some("TRUE")).then(|| r.get("value").unwrap_or("").to_owned()))
    }

    /// Makes a client made by [`over_stream`](Client::over_stream) speak `version`, with the
    /// PMI-2 job id the launcher gave (`PMI_JOBID`), if any. Call before [`init`](Client::init).
    pub fn speaking(mut self, version: Version, jobid: Option<String>) -> Client {
        self.version = version;
        self.jobid = jobid;
        self
    }

    /// The protocol this client speaks.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Whether this process runs without a process manager.
    pub fn is_singleton(&self) -> bool {
        self.kind == ConnectionKind::Singleton
    }

    /// How the client reaches its process manager.
    pub fn connection_kind(&self) -> ConnectionKind {
        self.kind
    }

    /// This process's rank. Known from the environment or handshake, else after
    /// [`init`](Client::init); 0 until then.
    pub fn rank(&self) -> u32 {
        self.rank.unwrap_or(0)
    }

    /// The number of ranks in the job. Known from the environment or handshake, else after
    /// [`init`](Client::init); 1 until then.
    pub fn size(&self) -> u32 {
        self.size.unwrap_or(1)
    }

    /// Whether the process manager asked for debug output (`PMI_DEBUG`, or the handshake).
    pub fn debug(&self) -> bool {
        self.debug
    }

    /// Asks for the size limits (`cmd=get_maxes`). [`init`](Client::init) caches the answer
    /// and [`put`](Client::put) enforces it.
    pub fn get_maxes(&mut self) -> Result<Maxes> {
        self.require_init()?;
        if let Conn::Singleton { .. } = self.conn {
            return Ok(Maxes::HYDRA);
        }
        if self.version == Version::Two {
            return Ok(self.maxes);
        }
        let r = self.exchange(Command::new("get_maxes"), "maxes")?;
        let field = |key: &str| -> Result<usize> {
            parse_num(r.get(key).ok_or_else(|| missing("maxes", key))?, key)
        };
        Ok(Maxes {
            kvsname_max: field("kvsname_max")?,
            keylen_max: field("keylen_max")?,
            vallen_max: field("vallen_max")?,
        })
    }

    /// The name of the job's key-value space, which every `put` and `get` names.
    pub fn get_my_kvsname(&self) -> Result<&str> {
        self.require_init()?;
        self.kvsname
            .as_deref()
            .ok_or_else(|| Error::new(ErrorKind::State, "no kvsname after init"))
    }

    /// How many processes the job may grow to; `None` when the process manager does not know
    /// (Hydra answers -1 without a host list).
    pub fn get_universe_size(&mut self) -> Result<Option<u32>> {
        self.require_init()?;
        if let Conn::Singleton { .. } = self.conn {
            return Ok(Some(1));
        }
        if self.version == Version::Two {
            return Ok(self
                .job_attr("universeSize")?
                .and_then(|v| v.trim().parse::<u32>().ok()));
        }
        let r = self.exchange(Command::new("get_universe_size"), "universe_size")?;
        let size: i64 = parse_num(
            r.get("size")
                .ok_or_else(|| missing("universe_size", "size"))?,
            "size",
        )?;
        Ok(u32::try_from(size).ok())
    }

    /// The index of this executable in a multiple-program launch (0 for the first); -1 for a
    /// singleton, as simple_pmi answers.
    pub fn get_appnum(&mut self) -> Result<i32> {
        self.require_init()?;
        if let Conn::Singleton { .. } = self.conn {
            return Ok(-1);
        }
        if self.version == Version::Two {
            return Ok(self.appnum);
        }
        let r = self.exchange(Command::new("get_appnum"), "appnum")?;
        parse_num(
            r.get("appnum").ok_or_else(|| missing("appnum", "appnum"))?,
            "appnum",
        )
    }

    /// Publishes `key` = `value` in the job's key-value space. Other ranks are guaranteed to
    /// see it only after everyone has passed the next [`barrier`](Client::barrier) (Hydra
    /// caches puts until then).
    ///
    /// `key` must be 1..=`keylen_max` printable ASCII characters; `value` at most `vallen_max`
    /// bytes without spaces or control characters (use [`put_bytes`](Client::put_bytes) for
    /// anything else).
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        self.require_init()?;
        self.check_key(key)?;
        if value.len() > self.maxes.vallen_max {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "value for key {key:?} is {} bytes; the process manager allows {}",
                    value.len(),
                    self.maxes.vallen_max
                ),
            ));
        }
        if value.chars().any(|c| c == ' ' || c.is_control()) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "value for key {key:?} contains a space or control character; use put_bytes"
                ),
            ));
        }
        if let Conn::Singleton { kvs } = &mut self.conn {
            kvs.insert(key.to_owned(), value.to_owned());
            return Ok(());
        }
        if self.version == Version::Two {
            let req = Command::new("kvs-put")
                .with("key", key)
                .with("value", value);
            let r = self.exchange(req, "kvs-put-response")?;
            return check_rc(&r, "kvs-put");
        }
        let req = Command::new("put")
            .with("kvsname", self.kvsname.clone().unwrap_or_default())
            .with("key", key)
            .with("value", value);
        let r = self.exchange(req, "put_result")?;
        check_rc(&r, "put")
    }

    /// Publishes bytes under `key`, hex-encoded; at most `vallen_max / 2` bytes.
    pub fn put_bytes(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.put(key, &hex::encode(value))
    }

    /// Reads `key` from the job's key-value space: `Ok(None)` if nobody has put it (or its put
    /// is not yet visible because the barrier after it has not been passed).
    pub fn get(&mut self, key: &str) -> Result<Option<String>> {
        self.require_init()?;
        self.check_key(key)?;
        if let Conn::Singleton { kvs } = &self.conn {
            return Ok(kvs.get(key).cloned());
        }
        if self.version == Version::Two {
            let req = Command::new("kvs-get")
                .with("jobid", self.kvsname.clone().unwrap_or_default())
                .with("srcid", "-1")
                .with("key", key);
            let r = self.exchange(req, "kvs-get-response")?;
            check_rc(&r, "kvs-get")?;
            return Ok(
                (r.get("found") == Some("TRUE")).then(|| r.get("value").unwrap_or("").to_owned())
            );
        }
        let req = Command::new("get")
            .with("kvsname", self.kvsname.clone().unwrap_or_default())
            .with("key", key);
        let r = self.exchange(req, "get_result")?;
        match r.get("rc") {
            Some("0") => Ok(Some(r.get("value").unwrap_or("").to_owned())),
            _ => {
                let msg = r.get("msg").unwrap_or("");
                // Hydra: key_<key>_not_found; MPICH gforker: key_<kvsname>_not_found.
                if msg.starts_with("key_") && msg.ends_with("_not_found") {
                    Ok(None)
                } else {
                    Err(Error::new(
                        ErrorKind::Server,
                        format!("get of key {key:?} failed: {}", server_msg(&r)),
                    ))
                }
            }
        }
    }

    /// Reads a value written by [`put_bytes`](Client::put_bytes).
    pub fn get_bytes(&mut self, key: &str) -> Result<Option<Vec<u8>>> {
        match self.get(key)? {
            Some(v) => hex::decode(&v)
                .map(Some)
                .map_err(|e| Error::new(e.kind(), format!("value of key {key:?}: {}", e.detail()))),
            None => Ok(None),
        }
    }

    /// Waits until every rank has called `barrier` (PMI "fence"); afterwards every `put` made
    /// before it is visible to every `get`.
    pub fn barrier(&mut self) -> Result<()> {
        self.require_init()?;
        if let Conn::Singleton { .. } = self.conn {
            return Ok(());
        }
        if self.version == Version::Two {
            let r = self.exchange(Command::new("kvs-fence"), "kvs-fence-response")?;
            return check_rc(&r, "kvs-fence");
        }
        let r = self.exchange(Command::new("barrier_in"), "barrier_out")?;
        check_rc(&r, "barrier")
    }

    /// The node id of every rank, from the `PMI_process_mapping` the process manager
    /// published; `None` if it published none or an empty one (then compare hostnames).
    pub fn node_ids(&mut self) -> Result<Option<Vec<u32>>> {
        let mapping = if self.version == Version::Two && matches!(self.conn, Conn::Stream { .. }) {
            self.require_init()?;
            self.job_attr(PROCESS_MAPPING_KEY)?
        } else {
            self.get(PROCESS_MAPPING_KEY)?
        };
        let Some(mapping) = mapping else {
            return Ok(None);
        };
        let size = self.size();
        ProcessMapping::parse(&mapping)?.node_ids(size)
    }

    /// Leaves the job cleanly: `cmd=finalize`, wait for `finalize_ack`, close the connection.
    /// Every later call fails with [`ErrorKind::State`].
    pub fn finalize(&mut self) -> Result<()> {
        self.require_init()?;
        let result = match self.conn {
            Conn::Singleton { .. } => Ok(()),
            _ if self.version == Version::Two => self
                .exchange(Command::new("finalize"), "finalize-response")
                .and_then(|r| check_rc(&r, "finalize")),
            _ => self
                .exchange(Command::new("finalize"), "finalize_ack")
                .map(|_| ()),
        };
        self.state = State::Finalized;
        self.conn = Conn::Closed;
        result
    }

    /// Tells the process manager to end the whole job with exit code `code`, without exiting
    /// this process. PMI-1 has no reply to abort: the process manager kills every rank,
    /// including this one. Spaces in `message` are sent as underscores.
    pub fn send_abort(&mut self, code: i32, message: &str) -> Result<()> {
        match &mut self.conn {
            Conn::Stream { io, decoder, .. } => {
                let line = match decoder {
                    // PMI-2's abort carries no exit code: the launcher chooses one.
                    Framing::Two(_) => wire2::encode(
                        &Command::new("abort")
                            .with("isworld", "TRUE")
                            .with("msg", sanitize_msg(message)),
                    )?,
                    Framing::One(_) => Command::new("abort")
                        .with("exitcode", code.to_string())
                        .with("error_msg", sanitize_msg(message))
                        .to_wire()?
                        .into_bytes(),
                };
                io.write_all(&line)
                    .and_then(|()| io.flush())
                    .map_err(|e| Error::io("sending cmd=abort", e))
            }
            Conn::Singleton { .. } | Conn::Closed => Ok(()),
        }
    }

    /// Aborts the job, as `PMI_Abort` does: prints `message` to stderr, asks the process
    /// manager to end every rank with `code` (best effort), and exits this process with `code`.
    pub fn abort(&mut self, code: i32, message: &str) -> ! {
        // Not eprintln!: a closed stderr must not turn an abort into a panic.
        let _ = writeln!(
            io::stderr(),
            "[rank {}] aborting job: {message}",
            self.rank()
        );
        let _ = self.send_abort(code, message);
        std::process::exit(code)
    }

    fn require_init(&self) -> Result<()> {
        match self.state {
            State::Initialized => Ok(()),
            State::Connected => Err(Error::new(ErrorKind::State, "call init() first")),
            State::Finalized => Err(Error::new(ErrorKind::State, "the client is finalized")),
        }
    }

    fn check_key(&self, key: &str) -> Result<()> {
        if key.is_empty() || key.len() > self.maxes.keylen_max {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "key {key:?} must be 1..={} bytes long",
                    self.maxes.keylen_max
                ),
            ));
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("key {key:?} must be printable ASCII without spaces"),
            ));
        }
        Ok(())
    }

    /// Asks the process manager to tell this rank when others leave or fail (a ch4run
    /// extension, see [`crate::server`]). `Ok(false)`, and nothing asked, when the launcher
    /// does not offer it (Hydra, a singleton). Call after [`init`](Client::init); the events
    /// then come from [`poll_peer_events`](Client::poll_peer_events).
    pub fn watch_peers(&mut self) -> Result<bool> {
        if !self.events_offered || !matches!(self.conn, Conn::Stream { .. }) {
            return Ok(false);
        }
        let reply = self.exchange(Command::new("watch_peers"), "watching")?;
        check_rc(&reply, "watch_peers")?;
        Ok(true)
    }

    /// The peer events that have arrived since the last call, without blocking: what is
    /// readable on the connection now is read. Replies never arrive here (PMI-1 has one
    /// request at a time and it is answered before its call returns), only events.
    pub fn poll_peer_events(&mut self) -> Result<Vec<PeerEvent>> {
        while let Conn::Stream { decoder, fd, io } = &mut self.conn {
            if let Some(msg) = decoder.next_message() {
                let msg = msg.map_err(|e| Error::wire("malformed line from the launcher", e))?;
                if msg.name() == "peer_event" {
                    self.events.push(parse_peer_event(&msg)?);
                    continue;
                }
                return Err(Error::new(
                    ErrorKind::Protocol,
                    format!("unasked cmd={} from the process manager", msg.name()),
                ));
            }
            let Some(fd) = *fd else { break };
            if !readable(fd)? {
                break;
            }
            let mut buf = [0u8; 1024];
            match io.read(&mut buf) {
                Ok(0) => {
                    return Err(Error::new(
                        ErrorKind::Closed,
                        "the process manager closed the PMI connection",
                    ))
                }
                Ok(n) => decoder.push(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("reading peer events", e)),
            }
        }
        Ok(std::mem::take(&mut self.events))
    }

    /// Sends `req` and returns the reply, which must be `cmd=expect` (or a `cmd=error` from a
    /// server that could not parse or does not know the request, returned as an error).
    fn exchange(&mut self, req: Command, expect: &str) -> Result<Command> {
        let Conn::Stream { io, decoder, .. } = &mut self.conn else {
            return Err(Error::new(ErrorKind::State, "no PMI connection"));
        };
        let line = match decoder {
            Framing::One(_) => req.to_wire().map(String::into_bytes),
            Framing::Two(_) => wire2::encode(&req),
        }
        .map_err(|e| Error::wire(format!("cannot send cmd={}", req.name()), e))?;
        io.write_all(&line)
            .and_then(|()| io.flush())
            .map_err(|e| Error::io(format!("sending cmd={}", req.name()), e))?;
        let reply = self.recv(req.name())?;
        if reply.name() == "error" {
            return Err(Error::new(
                ErrorKind::Server,
                format!("cmd={} was refused: {}", req.name(), server_msg(&reply)),
            ));
        }
        if reply.name() != expect {
            return Err(Error::new(
                ErrorKind::Protocol,
                format!(
                    "expected cmd={expect} in reply to cmd={}, got cmd={}",
                    req.name(),
                    reply.name()
                ),
            ));
        }
        Ok(reply)
    }

    /// Reads the next message, however many reads it takes. Peer events that arrive first
    /// are kept for [`poll_peer_events`](Client::poll_peer_events).
    fn recv(&mut self, waiting_for: &str) -> Result<Command> {
        let Conn::Stream { io, decoder, .. } = &mut self.conn else {
            return Err(Error::new(ErrorKind::State, "no PMI connection"));
        };
        let mut buf = [0u8; 4096];
        loop {
            if let Some(msg) = decoder.next_message() {
                let msg = msg
                    .map_err(|e| Error::wire(format!("malformed reply to cmd={waiting_for}"), e))?;
                if msg.name() == "peer_event" {
                    self.events.push(parse_peer_event(&msg)?);
                    continue;
                }
                return Ok(msg);
            }
            match io.read(&mut buf) {
                Ok(0) => {
                    return Err(Error::new(
                        ErrorKind::Closed,
                        format!(
                            "the process manager closed the PMI connection while this rank \
                             waited for the reply to cmd={waiting_for}"
                        ),
                    ))
                }
                Ok(n) => decoder.push(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Error::io(
                        format!("reading the reply to cmd={waiting_for}"),
                        e,
                    ))
                }
            }
        }
    }
}

/// The protocol the launcher speaks, from what it set: `PMI_JOBID` is PMI-2's (the job id a
/// PMI-2 client names in `fullinit`; Slurm's `--mpi=pmi2` sets it), which PMI-1 launchers
/// (Hydra's default, ch4run) do not set.
fn version_of(get: &impl Fn(&str) -> Option<String>) -> Version {
    if get("PMI_JOBID").is_some() {
        Version::Two
    } else {
        Version::One
    }
}

/// Decodes `cmd=peer_event rank=R state=left|failed`.
fn parse_peer_event(msg: &Command) -> Result<PeerEvent> {
    let rank = parse_num::<u32>(msg.get("rank").unwrap_or(""), "rank")?;
    match msg.get("state") {
        Some("left") => Ok(PeerEvent::Left(rank)),
        Some("failed") => Ok(PeerEvent::Failed(rank)),
        other => Err(Error::new(
            ErrorKind::Protocol,
            format!("cmd=peer_event with state {other:?}"),
        )),
    }
}

/// Whether `fd` has something to read now (poll with a zero timeout).
#[allow(unsafe_code)]
fn readable(fd: RawFd) -> Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, valid for the call; a zero timeout never blocks.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(Error::io("polling the PMI connection", e));
    }
    Ok(r > 0 && p.revents != 0)
}

/// Takes a private duplicate of the inherited descriptor `fd`.
///
/// Duplicating, rather than adopting `fd` itself, means the client closes only a descriptor it
/// created, whatever else in the process refers to `fd`; the duplicate is close-on-exec so the
/// PMI connection does not leak into programs this rank starts.
#[allow(unsafe_code)]
fn take_inherited_fd(fd: RawFd) -> Result<OwnedFd> {
    if PMI_FD_TAKEN.swap(true, Ordering::SeqCst) {
        return Err(Error::new(
            ErrorKind::State,
            "PMI_FD is already in use by another Client in this process",
        ));
    }
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) takes plain integers and touches no memory of ours; on an
    // fd that is not open it fails with EBADF, which we report.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        PMI_FD_TAKEN.store(false, Ordering::SeqCst);
        return Err(Error::io(
            format!("PMI_FD={fd} is not an open file descriptor"),
            io::Error::last_os_error(),
        ));
    }
    // The inherited descriptor stays open (its number must not be reused while `PMI_FD`
    // names it) but goes no further: a program this rank starts must not inherit the socket
    // and speak PMI as this rank. In such a program `PMI_FD` then names no open descriptor,
    // a clear error.
    // SAFETY: fcntl(F_SETFD) takes plain integers and touches no memory of ours; `fd` is open
    // (F_DUPFD_CLOEXEC of it just succeeded).
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: `dup` was just returned by F_DUPFD_CLOEXEC, so it is open and no other object in
    // the process owns it; the OwnedFd becomes its only owner and closes it exactly once.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

fn split_host_port(addr: &str) -> Result<(&str, u16)> {
    let bad = || {
        Error::new(
            ErrorKind::Environment,
            format!("PMI_PORT={addr:?} is not of the form host:port"),
        )
    };
    let (host, port) = addr.trim().rsplit_once(':').ok_or_else(bad)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let port = port.parse::<u16>().map_err(|_| bad())?;
    if host.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok((host, port))
}

fn parse_num<T: std::str::FromStr>(v: &str, what: &str) -> Result<T> {
    v.trim().parse().map_err(|_| {
        Error::new(
            ErrorKind::Protocol,
            format!("process manager sent {what}={v:?}, not a number in range"),
        )
    })
}

fn missing(reply: &str, key: &str) -> Error {
    Error::new(
        ErrorKind::Protocol,
        format!("cmd={reply} reply lacks the {key} field"),
    )
}

fn server_msg(reply: &Command) -> String {
    let msg = reply
        .get("msg")
        .or_else(|| reply.get("errmsg"))
        .unwrap_or("no message");
    format!("rc={} msg={msg}", reply.get("rc").unwrap_or("?"))
}

/// An `rc` other than 0 is a refusal; no `rc` at all (Hydra's `barrier_out`) is success.
fn check_rc(reply: &Command, what: &str) -> Result<()> {
    match reply.get("rc") {
        None | Some("0") => Ok(()),
        Some(_) => Err(Error::new(
            ErrorKind::Server,
            format!("{what} failed: {}", server_msg(reply)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::thread;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn no_variables_means_singleton() {
        let mut c = Client::from_vars(vars(&[]), false).unwrap();
        assert!(c.is_singleton());
        assert!(c.put("k", "v").is_err(), "put before init is a state error");
        c.init().unwrap();
        assert_eq!((c.rank(), c.size()), (0, 1));
        assert!(c.get_my_kvsname().unwrap().starts_with("singinit_kvs_"));
        assert_eq!(c.get_universe_size().unwrap(), Some(1));
        assert_eq!(c.get_appnum().unwrap(), -1);
        assert_eq!(c.get_maxes().unwrap(), Maxes::HYDRA);
        c.put("card", "abc").unwrap();
        c.barrier().unwrap();
        assert_eq!(c.get("card").unwrap().as_deref(), Some("abc"));
        assert_eq!(c.get("nope").unwrap(), None);
        c.put_bytes("bin", &[0, 1, 254, 255]).unwrap();
        assert_eq!(c.get_bytes("bin").unwrap(), Some(vec![0, 1, 254, 255]));
        assert_eq!(c.node_ids().unwrap(), Some(vec![0]));
        c.finalize().unwrap();
        assert_eq!(c.get("card").unwrap_err().kind(), ErrorKind::State);
    }

    #[test]
    fn singleton_enforces_hydra_limits() {
        let mut c = Client::singleton();
        c.init().unwrap();
        let e = c.put(&"k".repeat(65), "v").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        let e = c.put("k", &"v".repeat(1025)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(
            c.put("k", "a b").unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            c.put("a key", "v").unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            c.put_bytes("k", &[7; 513]).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        c.put_bytes("k", &[7; 512]).unwrap();
        assert_eq!(c.init().unwrap_err().kind(), ErrorKind::State);
    }

    #[test]
    fn pmi_jobid_says_the_launcher_speaks_pmi2() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = format!("127.0.0.1:{}", listener.local_addr().unwrap().port());
        for (jobid, want) in [(Some("slurm.7"), Version::Two), (None, Version::One)] {
            let port = port.clone();
            let get = move |k: &str| match k {
                "PMI_PORT" => Some(port.clone()),
                "PMI_RANK" => Some("0".to_owned()),
                "PMI_JOBID" => jobid.map(str::to_owned),
                _ => None,
            };
            let c = Client::from_vars(get, false).unwrap();
            assert_eq!(c.version(), want, "PMI_JOBID={jobid:?}");
        }
    }

    #[test]
    fn bad_environment_is_reported() {
        let e = Client::from_vars(vars(&[("PMI_FD", "3")]), false).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Environment);
        let e = Client::from_vars(vars(&[("PMI_PORT", "nohostport")]), false).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Environment);
        let e = Client::from_vars(vars(&[("PMI_PORT", "localhost:99999")]), false).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Environment);
        let e = Client::from_vars(vars(&[("PMI_PORT", "127.0.0.1:1"), ("PMI_ID", "x")]), false)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Environment);
    }

    #[test]
    fn host_port_forms() {
        assert_eq!(split_host_port("vm:41821").unwrap(), ("vm", 41821));
        assert_eq!(split_host_port("[::1]:5").unwrap(), ("::1", 5));
        assert!(split_host_port(":5").is_err());
        assert!(split_host_port("h:0").is_err());
    }

    /// A scripted server: answers each request line with the next canned reply.
    fn scripted(replies: &'static [&'static str]) -> (UnixStream, thread::JoinHandle<Vec<String>>) {
        let (a, b) = UnixStream::pair().unwrap();
        let h = thread::spawn(move || {
            let mut seen = Vec::new();
            let mut d = Decoder::new();
            let mut b = b;
            let mut buf = [0u8; 4096];
            let mut replies = replies.iter();
            loop {
                while let Some(Ok(c)) = d.next_message() {
                    seen.push(c.to_wire().unwrap());
                    match replies.next() {
                        Some(r) => b.write_all(r.as_bytes()).unwrap(),
                        None => return seen,
                    }
                }
                match b.read(&mut buf) {
                    Ok(0) | Err(_) => return seen,
                    Ok(n) => d.push(&buf[..n]),
                }
            }
        });
        (a, h)
    }

    #[test]
    fn speaks_the_hydra_dialect() {
        // Replies exactly as Hydra 4.0.2 sends them.
        let (s, h) = scripted(&[
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
            "cmd=my_kvsname kvsname=kvs_1_0\n",
            "cmd=put_result rc=0 msg=success\n",
            "cmd=barrier_out\n",
            "cmd=get_result rc=0 msg=success value=(vector,(0,1,1))\n",
            "cmd=get_result rc=-1 msg=key_nosuch_not_found value=unknown\n",
            "cmd=universe_size size=-1\n",
            "cmd=appnum appnum=0\n",
            "cmd=finalize_ack\n",
        ]);
        let mut c = Client::over_stream(s, Some(1), Some(2)).unwrap();
        c.init().unwrap();
        assert_eq!(c.get_my_kvsname().unwrap(), "kvs_1_0");
        c.put("k", "a=b").unwrap();
        c.barrier().unwrap();
        assert_eq!(c.node_ids().unwrap(), Some(vec![0, 0]));
        assert_eq!(c.get("nosuch").unwrap(), None);
        assert_eq!(c.get_universe_size().unwrap(), None);
        assert_eq!(c.get_appnum().unwrap(), 0);
        c.finalize().unwrap();
        let seen = h.join().unwrap();
        assert_eq!(
            seen,
            [
                "cmd=init pmi_version=1 pmi_subversion=1\n",
                "cmd=get_maxes\n",
                "cmd=get_my_kvsname\n",
                "cmd=put kvsname=kvs_1_0 key=k value=a=b\n",
                "cmd=barrier_in\n",
                "cmd=get kvsname=kvs_1_0 key=PMI_process_mapping\n",
                "cmd=get kvsname=kvs_1_0 key=nosuch\n",
                "cmd=get_universe_size\n",
                "cmd=get_appnum\n",
                "cmd=finalize\n",
            ]
        );
    }

    #[test]
    fn refused_init_is_a_server_error() {
        let (s, _h) = scripted(&["cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=-1\n"]);
        let mut c = Client::over_stream(s, Some(0), Some(1)).unwrap();
        let e = c.init().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Server);
        assert!(e.to_string().contains("server 2.0"), "{e}");
    }

    #[test]
    fn garbage_and_wrong_replies_are_clear_errors() {
        let (s, _h) = scripted(&["this is not pmi\n"]);
        let mut c = Client::over_stream(s, Some(0), Some(1)).unwrap();
        let e = c.init().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Wire);
        assert!(e.to_string().contains("malformed reply to cmd=init"), "{e}");

        let (s, _h) = scripted(&["cmd=barrier_out\n"]);
        let mut c = Client::over_stream(s, Some(0), Some(1)).unwrap();
        let e = c.init().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol);
        assert!(
            e.to_string().contains("expected cmd=response_to_init"),
            "{e}"
        );

        let (s, _h) = scripted(&["cmd=error rc=-1 msg=unknown_command_init\n"]);
        let mut c = Client::over_stream(s, Some(0), Some(1)).unwrap();
        let e = c.init().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Server);
        assert!(e.to_string().contains("unknown_command_init"), "{e}");
    }

    #[test]
    fn a_vanished_server_is_closed_not_a_hang() {
        let (s, h) = scripted(&["cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"]);
        let mut c = Client::over_stream(s, Some(0), Some(1)).unwrap();
        let e = c.init().unwrap_err();
        h.join().unwrap();
        assert_eq!(e.kind(), ErrorKind::Closed);
        assert!(e.to_string().contains("cmd=get_maxes"), "{e}");
    }

    #[test]
    fn get_failures_other_than_absence_are_errors() {
        let (s, _h) = scripted(&[
            "cmd=response_to_init rc=0\n",
            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
            "cmd=my_kvsname kvsname=kvs_1_0\n",
            "cmd=get_result rc=-1 msg=kvs_kvs_1_0_not_found value=unknown\n",
        ]);
        let mut c = Client::over_stream(s, Some(0), Some(1)).unwrap();
        c.init().unwrap();
        assert_eq!(c.get("k").unwrap_err().kind(), ErrorKind::Server);
    }
}
