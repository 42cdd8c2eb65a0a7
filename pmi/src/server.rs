//! The PMI-1 server core: a sans-IO state machine for one job.
//!
//! [`Server`] knows nothing of sockets, threads or clocks. The transport (ch4run's
//! [`SocketServer`](crate::SocketServer), or a test) registers each connection with
//! [`add_client`](Server::add_client), feeds it every decoded message with
//! [`handle_command`](Server::handle_command) (or the decode error with
//! [`handle_malformed`](Server::handle_malformed), or end of stream with
//! [`handle_disconnect`](Server::handle_disconnect)), then drains [`Output`]s with
//! [`poll_output`](Server::poll_output): lines to send and to whom, and job-level events (an
//! abort, a finalize, a job that can no longer make progress) for the launcher to act on.
//!
//! It answers what MPICH's simple PMI client sends, the way Hydra's `pmiserv` answers: `init`,
//! `initack` (the `PMI_PORT` handshake), `get_maxes`, `get_my_kvsname`, `get_universe_size`,
//! `get_appnum`, `put`, `get`, `barrier_in`, `finalize`, `abort`, plus `get_rank` / `get_size`
//! for clients that have neither the environment nor the handshake. `spawn` gets a clean
//! refusal. Unknown commands and malformed lines get `cmd=error rc=-1 msg=...` so that a client
//! waiting for a reply is told why instead of hanging.
//!
//! One extension, for ch4's own clients: `watch_peers` (answered `cmd=watching rc=0`) asks
//! to be told when another rank leaves the job: from then on the server writes, unasked,
//! `cmd=peer_event rank=R state=left` when rank R finalizes and `state=failed` when its
//! connection ends without finalize (it died, or exited without leaving), and first replays
//! what happened before the request. A network that cannot see a peer die (libfabric's
//! reliable datagrams retry a dead peer's address for ever) learns it this way, as ULFM
//! implementations learn it from their runtime (PMIx event notification). Clients that do not
//! ask get no such lines, so MPICH's PMI clients are unaffected.
//!
//! Differences from Hydra, on purpose: a `put` is visible to `get` at once, not only after the
//! next barrier (correct programs cannot tell), and a repeated `put` of a key replaces the value
//! (as Hydra 4 does; MPICH's older gforker refused it).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use crate::error::{Error, ErrorKind, Result};
use crate::mapping::{ProcessMapping, PROCESS_MAPPING_KEY};
use crate::wire::{Command, WireError, MAX_KEY_LEN, MAX_KVSNAME_LEN, MAX_VALUE_LEN};

/// The PMI version this server speaks.
pub const PMI_VERSION: u32 = 1;
/// The PMI subversion this server speaks.
pub const PMI_SUBVERSION: u32 = 1;

/// A connection, named by the transport. Any value, as long as it is unique among live clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u64);

/// Everything about the job the server hands out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobConfig {
    /// Number of ranks; barriers complete when this many have entered.
    pub size: u32,
    /// Name of the job's key-value space, returned by `get_my_kvsname` and required in
    /// `put` / `get`.
    pub kvsname: String,
    /// `get_appnum` answer: the index of this executable in an MPMD launch.
    pub appnum: i32,
    /// `get_universe_size` answer; -1 means unknown, as Hydra answers without a host list.
    pub universe_size: i32,
    /// The `debug` value sent in the `PMI_PORT` handshake.
    pub debug: bool,
    /// Keys present in the key-value space before any rank starts (Hydra's "preput"), such as
    /// `PMI_process_mapping`.
    pub preput: Vec<(String, String)>,
    /// What a `PMI_PORT` client must say in `initack` to be rank `r`: `None`, its rank itself
    /// (the convention of Hydra and MPICH's clients); `Some(ids)`, `ids[r]`. A port on
    /// 127.0.0.1 is reachable by every user of the host, so a launcher that serves one draws
    /// these at random and hands each rank its own in `PMI_ID` (readable only by the rank's
    /// user): a process that was not given one cannot join, read the key-value space or
    /// abort the job. Ids are `u32` below 2^31, what MPICH's clients read with `atoi`.
    pub port_ids: Option<Vec<u32>>,
}

impl JobConfig {
    /// A single-node job of `size` ranks: a key-value space named after this process,
    /// universe size = `size`, and `PMI_process_mapping` = `(vector,(0,1,size))`.
    pub fn single_node(size: u32) -> Self {
        JobConfig {
            size,
            kvsname: format!("kvs_{}_0", std::process::id()),
            appnum: 0,
            universe_size: i32::try_from(size).unwrap_or(-1),
            debug: false,
            preput: vec![(
                PROCESS_MAPPING_KEY.to_owned(),
                ProcessMapping::single_node(size).to_string(),
            )],
            port_ids: None,
        }
    }
}

/// What the transport must do after feeding the server an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Write `data` (one or more complete lines) to `to`.
    Send {
        /// The destination connection.
        to: ClientId,
        /// Newline-terminated PMI text.
        data: String,
    },
    /// A rank asked to abort the job; the launcher should kill every rank and exit with `code`.
    Abort {
        /// The connection that asked.
        from: ClientId,
        /// Its rank, if known.
        rank: Option<u32>,
        /// The exit code it asked for.
        code: i32,
        /// The message it sent, if any (PMI-1 clients usually print it themselves).
        message: Option<String>,
    },
    /// A rank finalized: it will send nothing more, and its exit is expected.
    Finalized {
        /// The connection.
        client: ClientId,
        /// Its rank, if known.
        rank: Option<u32>,
    },
    /// The job can no longer make progress (a rank left or finalized while others wait for it
    /// in a barrier, or entered one after another rank left or finalized); the launcher should
    /// end the job with this message. Emitted at most once.
    Failed {
        /// Why, naming the rank.
        message: String,
    },
    /// A connection that has not said which rank it is (a `PMI_PORT` client before a
    /// successful `initack`) sent something else, or an `initack` that names no rank it may
    /// be: it is refused. Its error reply has been queued before this; the transport writes
    /// it, then closes the connection. The job goes on.
    Refused {
        /// The connection.
        client: ClientId,
        /// Why, for the launcher's log: never an id or a key of the job.
        reason: String,
    },
}

/// The unasked line that tells a watching client about `rank` (`left` or `failed`).
fn peer_event(rank: u32, state: &str) -> Command {
    Command::new("peer_event")
        .with("rank", rank.to_string())
        .with("state", state)
}

#[derive(Debug, Default)]
struct ClientState {
    rank: Option<u32>,
    in_barrier: bool,
    finalized: bool,
    /// Asked for peer events (`watch_peers`).
    watching: bool,
}

/// The server state machine for one job. See the [module docs](self).
#[derive(Debug)]
pub struct Server {
    config: JobConfig,
    kvs: BTreeMap<String, String>,
    clients: HashMap<ClientId, ClientState>,
    /// Which client holds each rank; a rank is held from registration (or `initack`) on.
    ranks: HashMap<u32, ClientId>,
    /// Ranks whose connection ended before `finalize`.
    lost: BTreeSet<u32>,
    /// Ranks that finalized: they will never enter another barrier.
    finalized: BTreeSet<u32>,
    barrier_count: u32,
    failed: bool,
    out: VecDeque<Output>,
}

impl Server {
    /// A server for the job described by `config`.
    ///
    /// Fails if the size is zero or the kvsname or a preput key or value could not be sent on
    /// the wire.
    pub fn new(config: JobConfig) -> Result<Self> {
        if config.size == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "job size must be at least 1",
            ));
        }
        check_token("kvsname", &config.kvsname, MAX_KVSNAME_LEN)?;
        if let Some(ids) = &config.port_ids {
            let distinct: BTreeSet<u32> = ids.iter().copied().collect();
            if ids.len() != config.size as usize
                || distinct.len() != ids.len()
                || ids.iter().any(|&id| id > i32::MAX as u32)
            {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    "port ids must be one per rank, distinct, below 2^31",
                ));
            }
        }
        let mut kvs = BTreeMap::new();
        for (k, v) in &config.preput {
            check_token("preput key", k, MAX_KEY_LEN)?;
            check_value("preput value", v)?;
            kvs.insert(k.clone(), v.clone());
        }
        Ok(Server {
            config,
            kvs,
            clients: HashMap::new(),
            ranks: HashMap::new(),
            lost: BTreeSet::new(),
            finalized: BTreeSet::new(),
            barrier_count: 0,
            failed: false,
            out: VecDeque::new(),
        })
    }

    /// The job description.
    pub fn config(&self) -> &JobConfig {
        &self.config
    }

    /// The current value of `key` in the job's key-value space.
    pub fn kvs_get(&self, key: &str) -> Option<&str> {
        self.kvs.get(key).map(String::as_str)
    }

    /// How many ranks are waiting in the current barrier.
    pub fn barrier_waiting(&self) -> u32 {
        self.barrier_count
    }

    /// Whether every rank of the job is held by a connection (or was, and left): no further
    /// connection can join, so a launcher may stop listening for them.
    pub fn all_ranks_held(&self) -> bool {
        self.ranks.len() == self.config.size as usize
    }

    /// The rank of a connection, once known.
    pub fn rank_of(&self, client: ClientId) -> Option<u32> {
        self.clients.get(&client).and_then(|c| c.rank)
    }

    /// Registers a connection. `rank` is known for `PMI_FD` clients (the launcher created the
    /// socket for that rank); `None` for `PMI_PORT` clients, which name their rank in `initack`.
    ///
    /// Fails if the id is in use, the rank is out of range, or another client holds the rank.
    pub fn add_client(&mut self, id: ClientId, rank: Option<u32>) -> Result<()> {
        if self.clients.contains_key(&id) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("client id {} is already registered", id.0),
            ));
        }
        if let Some(rank) = rank {
            self.claim_rank(id, rank)?;
        }
        self.clients.insert(
            id,
            ClientState {
                rank,
                ..ClientState::default()
            },
        );
        Ok(())
    }

    fn claim_rank(&mut self, id: ClientId, rank: u32) -> Result<()> {
        if rank >= self.config.size {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "rank {rank} is out of range for a job of {}",
                    self.config.size
                ),
            ));
        }
        if self.ranks.contains_key(&rank) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("rank {rank} is already held by another connection"),
            ));
        }
        self.ranks.insert(rank, id);
        Ok(())
    }

    /// The next thing the transport must do, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn send(&mut self, to: ClientId, reply: Command) {
        let data = match reply.to_wire() {
            Ok(data) => data,
            // Replies are built from validated input, so this is unreachable in practice; a
            // fixed line keeps the client from hanging if it ever is not.
            Err(_) => "cmd=error rc=-1 msg=internal_error_formatting_reply\n".to_owned(),
        };
        self.out.push_back(Output::Send { to, data });
    }

    fn send_error(&mut self, to: ClientId, reply_cmd: &str, msg: &str) {
        self.send(
            to,
            Command::new(reply_cmd)
                .with("rc", "-1")
                .with("msg", sanitize_msg(msg)),
        );
    }

    fn fail(&mut self, message: String) {
        if !self.failed {
            self.failed = true;
            self.out.push_back(Output::Failed { message });
        }
    }

    /// A line from `from` that did not decode. The client gets `cmd=error rc=-1` with the
    /// reason, so a client blocked on a reply is released with an error rather than a hang.
    /// A connection that has not said which rank it is is refused ([`Output::Refused`]).
    pub fn handle_malformed(&mut self, from: ClientId, err: &WireError) -> Result<()> {
        self.known(from)?;
        let msg = format!("malformed PMI line: {err}");
        if self.rank_of(from).is_none() {
            self.refuse(from, "error", msg);
        } else {
            self.send_error(from, "error", &msg);
        }
        Ok(())
    }

    /// The connection `from` reached end of stream. If the rank had not finalized and other
    /// ranks are (or will be) waiting for it in a barrier, the job cannot complete: that is
    /// reported as [`Output::Failed`].
    pub fn handle_disconnect(&mut self, from: ClientId) -> Result<()> {
        let state = self.clients.remove(&from).ok_or_else(|| unknown(from))?;
        let Some(rank) = state.rank else {
            return Ok(());
        };
        if state.finalized {
            return Ok(());
        }
        if state.in_barrier {
            self.barrier_count = self.barrier_count.saturating_sub(1);
        }
        self.lost.insert(rank);
        self.tell_watchers(rank, "failed");
        if self.barrier_count > 0 {
            self.fail(format!(
                "rank {rank} closed its PMI connection without finalize while {} rank(s) wait \
                 for it in a barrier",
                self.barrier_count
            ));
        }
        Ok(())
    }

    /// A decoded message from `from`: queues the reply (or replies, for a completed barrier)
    /// and any job-level event.
    ///
    /// A connection that has not said which rank it is may send only `initack`: anything else
    /// is refused ([`Output::Refused`]), so a stray process that reached the launcher's port
    /// learns nothing of the job and can neither write its key-value space nor abort it.
    pub fn handle_command(&mut self, from: ClientId, cmd: &Command) -> Result<()> {
        self.known(from)?;
        if self.rank_of(from).is_none() && (cmd.is_multi() || cmd.name() != "initack") {
            let reason = format!(
                "cmd={} from a connection that has not said which rank it is (initack first)",
                cmd.name()
            );
            self.refuse(from, "error", reason);
            return Ok(());
        }
        if cmd.is_multi() {
            // Only spawn uses the multi-line form; answer it the way its caller waits for.
            let reply = if cmd.name() == "spawn" {
                "spawn_result"
            } else {
                "error"
            };
            let msg = format!("{} is not supported by this process manager", cmd.name());
            self.send_error(from, reply, &msg);
            return Ok(());
        }
        match cmd.name() {
            "init" => self.on_init(from, cmd),
            "initack" => self.on_initack(from, cmd),
            "get_maxes" => self.send(
                from,
                Command::new("maxes")
                    .with("kvsname_max", MAX_KVSNAME_LEN.to_string())
                    .with("keylen_max", MAX_KEY_LEN.to_string())
                    .with("vallen_max", MAX_VALUE_LEN.to_string()),
            ),
            "get_my_kvsname" => {
                let name = self.config.kvsname.clone();
                self.send(from, Command::new("my_kvsname").with("kvsname", name));
            }
            "get_universe_size" => {
                let size = self.config.universe_size.to_string();
                self.send(from, Command::new("universe_size").with("size", size));
            }
            "get_appnum" => {
                let appnum = self.config.appnum.to_string();
                self.send(from, Command::new("appnum").with("appnum", appnum));
            }
            "get_rank" => match self.rank_of(from) {
                Some(rank) => self.send(
                    from,
                    Command::new("rank")
                        .with("rc", "0")
                        .with("rank", rank.to_string()),
                ),
                None => self.send_error(from, "rank", "rank unknown: send initack first"),
            },
            "get_size" => {
                let size = self.config.size.to_string();
                self.send(
                    from,
                    Command::new("size").with("rc", "0").with("size", size),
                );
            }
            "put" => self.on_put(from, cmd),
            "get" => self.on_get(from, cmd),
            "barrier_in" => self.on_barrier(from),
            "finalize" => self.on_finalize(from),
            "watch_peers" => self.on_watch_peers(from),
            "abort" => self.on_abort(from, cmd),
            "spawn" => self.send_error(
                from,
                "spawn_result",
                "spawn is not supported by this process manager",
            ),
            other => {
                let msg = format!("unknown command {other}");
                self.send_error(from, "error", &msg);
            }
        }
        Ok(())
    }

    fn known(&self, from: ClientId) -> Result<()> {
        if self.clients.contains_key(&from) {
            Ok(())
        } else {
            Err(unknown(from))
        }
    }

    fn on_init(&mut self, from: ClientId, cmd: &Command) {
        let version = cmd.get("pmi_version").and_then(|v| v.parse::<u32>().ok());
        let subversion = cmd
            .get("pmi_subversion")
            .and_then(|v| v.parse::<u32>().ok());
        // As MPICH's servers decide: same version, subversion no newer than ours.
        let ok = version == Some(PMI_VERSION) && subversion.is_some_and(|s| s <= PMI_SUBVERSION);
        let mut reply = Command::new("response_to_init")
            .with("pmi_version", PMI_VERSION.to_string())
            .with("pmi_subversion", PMI_SUBVERSION.to_string())
            .with("rc", if ok { "0" } else { "-1" });
        if !ok {
            reply.push(
                "msg",
                sanitize_msg(&format!(
                    "unsupported PMI version {}.{}; this server speaks {PMI_VERSION}.{PMI_SUBVERSION}",
                    cmd.get("pmi_version").unwrap_or("?"),
                    cmd.get("pmi_subversion").unwrap_or("?")
                )),
            );
        }
        self.send(from, reply);
    }

    /// Queues an error reply to `to`, then [`Output::Refused`].
    fn refuse(&mut self, to: ClientId, reply_cmd: &str, reason: String) {
        self.send_error(to, reply_cmd, &reason);
        self.out.push_back(Output::Refused { client: to, reason });
    }

    /// The rank whose port id is `id`: the id itself without [`JobConfig::port_ids`]; with
    /// them, compared with every rank's id in the same time whatever matches, so how long the
    /// answer takes says nothing about the ids.
    fn rank_of_port_id(&self, id: u32) -> Option<u32> {
        match &self.config.port_ids {
            None => (id < self.config.size).then_some(id),
            Some(ids) => {
                let mut found = u32::MAX;
                for (rank, &want) in ids.iter().enumerate() {
                    let diff = want ^ id;
                    // All ones when `diff` is 0, else 0, without a branch on the id.
                    let same = ((u64::from(diff)).wrapping_sub(1) >> 32) as u32;
                    found = (found & !same) | (rank as u32 & same);
                }
                (found != u32::MAX).then_some(found)
            }
        }
    }

    fn on_initack(&mut self, from: ClientId, cmd: &Command) {
        let Some(id) = cmd.get("pmiid").and_then(|v| v.parse::<u32>().ok()) else {
            if self.rank_of(from).is_none() {
                self.refuse(from, "initack", "initack needs a numeric pmiid".into());
            } else {
                self.send_error(from, "initack", "initack needs a numeric pmiid");
            }
            return;
        };
        let Some(claimed) = self.rank_of_port_id(id) else {
            // Not an id this launcher gave out: never say which ones are.
            let reason = "initack with a pmiid this job did not give out".to_owned();
            if self.rank_of(from).is_none() {
                self.refuse(from, "initack", reason);
            } else {
                self.send_error(from, "initack", &reason);
            }
            return;
        };
        match self.rank_of(from) {
            Some(rank) if rank == claimed => {}
            Some(rank) => {
                let msg = format!("this connection already is rank {rank}, not {claimed}");
                self.send_error(from, "initack", &msg);
                return;
            }
            None => {
                if let Err(e) = self.claim_rank(from, claimed) {
                    self.refuse(from, "initack", e.detail().to_owned());
                    return;
                }
                if let Some(state) = self.clients.get_mut(&from) {
                    state.rank = Some(claimed);
                }
            }
        }
        let data = format!(
            "cmd=initack\ncmd=set size={}\ncmd=set rank={claimed}\ncmd=set debug={}\n",
            self.config.size,
            u8::from(self.config.debug)
        );
        self.out.push_back(Output::Send { to: from, data });
    }

    fn check_kvsname(&mut self, from: ClientId, cmd: &Command, reply: &str) -> bool {
        match cmd.get("kvsname") {
            Some(name) if name == self.config.kvsname => true,
            Some(name) => {
                let msg = format!("kvs_{name}_not_found");
                self.send_error(from, reply, &msg);
                false
            }
            None => {
                self.send_error(from, reply, "missing kvsname");
                false
            }
        }
    }

    fn on_put(&mut self, from: ClientId, cmd: &Command) {
        if !self.check_kvsname(from, cmd, "put_result") {
            return;
        }
        let Some(key) = cmd.get("key") else {
            self.send_error(from, "put_result", "missing key");
            return;
        };
        // A missing value is the empty string, as Hydra treats it.
        let value = cmd.get("value").unwrap_or("");
        self.kvs.insert(key.to_owned(), value.to_owned());
        self.send(
            from,
            Command::new("put_result")
                .with("rc", "0")
                .with("msg", "success"),
        );
    }

    fn on_get(&mut self, from: ClientId, cmd: &Command) {
        if !self.check_kvsname(from, cmd, "get_result") {
            return;
        }
        let Some(key) = cmd.get("key") else {
            self.send_error(from, "get_result", "missing key");
            return;
        };
        let reply = match self.kvs.get(key) {
            Some(value) => Command::new("get_result")
                .with("rc", "0")
                .with("msg", "success")
                .with("value", value.clone()),
            // Hydra's exact wording, which clients use to tell "absent" from "failed".
            None => Command::new("get_result")
                .with("rc", "-1")
                .with("msg", format!("key_{key}_not_found"))
                .with("value", "unknown"),
        };
        self.send(from, reply);
    }

    fn on_barrier(&mut self, from: ClientId) {
        let Some(state) = self.clients.get_mut(&from) else {
            return;
        };
        let Some(rank) = state.rank else {
            self.send_error(from, "barrier_out", "rank unknown: send initack first");
            return;
        };
        if state.in_barrier {
            self.send_error(from, "barrier_out", "already waiting in this barrier");
            return;
        }
        if state.finalized {
            self.send_error(from, "barrier_out", "barrier after finalize");
            return;
        }
        state.in_barrier = true;
        self.barrier_count += 1;
        // A barrier needs every rank; one that left or finalized will never come.
        if let Some(&lost) = self.lost.iter().next() {
            self.fail(format!(
                "rank {rank} entered a barrier that cannot complete: rank {lost} closed its PMI \
                 connection without finalize"
            ));
            return;
        }
        if let Some(&done) = self.finalized.iter().next() {
            self.fail(format!(
                "rank {rank} entered a barrier that cannot complete: rank {done} already \
                 finalized"
            ));
            return;
        }
        if self.barrier_count == self.config.size {
            self.barrier_count = 0;
            let mut waiting: Vec<(u32, ClientId)> = self
                .clients
                .iter_mut()
                .filter(|(_, c)| c.in_barrier)
                .map(|(&id, c)| {
                    c.in_barrier = false;
                    (c.rank.unwrap_or(u32::MAX), id)
                })
                .collect();
            waiting.sort_unstable();
            for (_, id) in waiting {
                self.send(id, Command::new("barrier_out"));
            }
        }
    }

    fn on_finalize(&mut self, from: ClientId) {
        let Some(state) = self.clients.get_mut(&from) else {
            return;
        };
        state.finalized = true;
        let rank = state.rank;
        if state.in_barrier {
            state.in_barrier = false;
            self.barrier_count = self.barrier_count.saturating_sub(1);
        }
        self.send(from, Command::new("finalize_ack"));
        self.out.push_back(Output::Finalized { client: from, rank });
        if let Some(rank) = rank {
            self.finalized.insert(rank);
            self.tell_watchers(rank, "left");
            if self.barrier_count > 0 {
                let waiting = self.barrier_count;
                self.fail(format!(
                    "rank {rank} finalized while {waiting} rank(s) wait for it in a barrier"
                ));
            }
        }
    }

    /// `watch_peers`: acknowledges, then replays the ranks already gone, in rank order.
    fn on_watch_peers(&mut self, from: ClientId) {
        if let Some(state) = self.clients.get_mut(&from) {
            state.watching = true;
        }
        self.send(from, Command::new("watching").with("rc", "0"));
        let gone: Vec<(u32, &str)> = self
            .finalized
            .iter()
            .map(|&r| (r, "left"))
            .chain(self.lost.iter().map(|&r| (r, "failed")))
            .collect();
        for (rank, state) in gone {
            self.send(from, peer_event(rank, state));
        }
    }

    /// Writes a peer event about `rank` to every other client that asked for them.
    fn tell_watchers(&mut self, rank: u32, state: &str) {
        let mut watchers: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| c.watching && !c.finalized && c.rank != Some(rank))
            .map(|(&id, _)| id)
            .collect();
        watchers.sort_unstable();
        for to in watchers {
            self.send(to, peer_event(rank, state));
        }
    }

    fn on_abort(&mut self, from: ClientId, cmd: &Command) {
        // MPICH's servers default to a non-zero code when none parses.
        let code = cmd
            .get("exitcode")
            .and_then(|v| v.parse::<i32>().ok())
            .unwrap_or(1);
        let message = cmd
            .get("error_msg")
            .or_else(|| cmd.get("msg"))
            .map(str::to_owned);
        let rank = self.rank_of(from);
        self.out.push_back(Output::Abort {
            from,
            rank,
            code,
            message,
        });
    }
}

fn unknown(id: ClientId) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!("client id {} is not registered", id.0),
    )
}

fn check_token(what: &str, s: &str, max: usize) -> Result<()> {
    let ok = !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("{what} {s:?} must be 1..={max} printable ASCII characters without spaces"),
        ))
    }
}

fn check_value(what: &str, s: &str) -> Result<()> {
    if s.len() <= MAX_VALUE_LEN && !s.chars().any(|c| c == ' ' || c.is_control()) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("{what} must be at most {MAX_VALUE_LEN} bytes without spaces"),
        ))
    }
}

/// PMI-1 messages cannot contain spaces or control characters; Hydra writes them with
/// underscores (`key_x_not_found`), and so do we. Long messages are cut to fit a value.
pub(crate) fn sanitize_msg(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    for c in msg.chars() {
        let c = if c == ' ' || c.is_control() { '_' } else { c };
        if out.len() + c.len_utf8() > MAX_VALUE_LEN {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ClientId = ClientId(10);
    const B: ClientId = ClientId(11);
    const C: ClientId = ClientId(12);

    fn server(size: u32) -> Server {
        let mut cfg = JobConfig::single_node(size);
        cfg.kvsname = "kvs_test".into();
        Server::new(cfg).unwrap()
    }

    fn cmd(line: &str) -> Command {
        Command::parse(line.as_bytes()).unwrap()
    }

    /// Feeds one line and returns everything the server wants done, in order.
    fn feed(s: &mut Server, from: ClientId, line: &str) -> Vec<Output> {
        s.handle_command(from, &cmd(line)).unwrap();
        std::iter::from_fn(|| s.poll_output()).collect()
    }

    /// Feeds one line and returns the single reply line to the sender, parsed.
    fn ask(s: &mut Server, from: ClientId, line: &str) -> Command {
        let out = feed(s, from, line);
        match out.as_slice() {
            [Output::Send { to, data }] if *to == from => cmd(data),
            other => panic!("expected one reply, got {other:?}"),
        }
    }

    #[test]
    fn init_handshake_and_queries() {
        let mut s = server(2);
        s.add_client(A, Some(0)).unwrap();
        let r = ask(&mut s, A, "cmd=init pmi_version=1 pmi_subversion=1");
        assert_eq!(r.name(), "response_to_init");
        assert_eq!(r.get("rc"), Some("0"));
        let r = ask(&mut s, A, "cmd=get_maxes");
        assert_eq!(r.get("kvsname_max"), Some("256"));
        assert_eq!(r.get("keylen_max"), Some("64"));
        assert_eq!(r.get("vallen_max"), Some("1024"));
        assert_eq!(
            ask(&mut s, A, "cmd=get_my_kvsname").get("kvsname"),
            Some("kvs_test")
        );
        assert_eq!(
            ask(&mut s, A, "cmd=get_universe_size").get("size"),
            Some("2")
        );
        assert_eq!(ask(&mut s, A, "cmd=get_appnum").get("appnum"), Some("0"));
        assert_eq!(ask(&mut s, A, "cmd=get_rank").get("rank"), Some("0"));
        assert_eq!(ask(&mut s, A, "cmd=get_size").get("size"), Some("2"));
    }

    #[test]
    fn init_refuses_other_versions() {
        let mut s = server(1);
        s.add_client(A, Some(0)).unwrap();
        let r = ask(&mut s, A, "cmd=init pmi_version=2 pmi_subversion=0");
        assert_eq!(r.get("rc"), Some("-1"));
        assert!(r
            .get("msg")
            .unwrap()
            .contains("unsupported_PMI_version_2.0"));
        let r = ask(&mut s, A, "cmd=init pmi_version=1 pmi_subversion=9");
        assert_eq!(r.get("rc"), Some("-1"));
        let r = ask(&mut s, A, "cmd=init");
        assert_eq!(r.get("rc"), Some("-1"));
    }

    #[test]
    fn process_mapping_is_published() {
        let mut s = server(4);
        s.add_client(A, Some(0)).unwrap();
        let r = ask(
            &mut s,
            A,
            "cmd=get kvsname=kvs_test key=PMI_process_mapping",
        );
        assert_eq!(r.get("rc"), Some("0"));
        assert_eq!(r.get("value"), Some("(vector,(0,1,4))"));
    }

    #[test]
    fn put_get_and_missing_keys() {
        let mut s = server(2);
        s.add_client(A, Some(0)).unwrap();
        s.add_client(B, Some(1)).unwrap();
        let r = ask(
            &mut s,
            A,
            "cmd=put kvsname=kvs_test key=card0 value=tcp://x=1",
        );
        assert_eq!((r.name(), r.get("rc")), ("put_result", Some("0")));
        let r = ask(&mut s, B, "cmd=get kvsname=kvs_test key=card0");
        assert_eq!(r.get("value"), Some("tcp://x=1"));
        let r = ask(&mut s, B, "cmd=get kvsname=kvs_test key=nosuch");
        assert_eq!(r.get("rc"), Some("-1"));
        assert_eq!(r.get("msg"), Some("key_nosuch_not_found"));
        // Empty and replaced values.
        ask(&mut s, A, "cmd=put kvsname=kvs_test key=e");
        assert_eq!(s.kvs_get("e"), Some(""));
        ask(&mut s, A, "cmd=put kvsname=kvs_test key=card0 value=new");
        assert_eq!(s.kvs_get("card0"), Some("new"));
    }

    #[test]
    fn put_and_get_check_the_kvsname_and_key() {
        let mut s = server(1);
        s.add_client(A, Some(0)).unwrap();
        let r = ask(&mut s, A, "cmd=put kvsname=other key=k value=v");
        assert_eq!(r.get("rc"), Some("-1"));
        assert_eq!(r.get("msg"), Some("kvs_other_not_found"));
        let r = ask(&mut s, A, "cmd=get key=k");
        assert_eq!((r.name(), r.get("rc")), ("get_result", Some("-1")));
        let r = ask(&mut s, A, "cmd=put kvsname=kvs_test value=v");
        assert_eq!(r.get("msg"), Some("missing_key"));
        assert_eq!(s.kvs_get("k"), None);
    }

    #[test]
    fn barrier_releases_everyone_only_when_all_arrive() {
        let mut s = server(3);
        for (id, rank) in [(A, 0), (B, 1), (C, 2)] {
            s.add_client(id, Some(rank)).unwrap();
        }
        assert!(feed(&mut s, B, "cmd=barrier_in").is_empty());
        assert!(feed(&mut s, A, "cmd=barrier_in").is_empty());
        assert_eq!(s.barrier_waiting(), 2);
        // Entering twice is an error, not a second count.
        let r = ask(&mut s, A, "cmd=barrier_in");
        assert_eq!(r.get("rc"), Some("-1"));
        let out = feed(&mut s, C, "cmd=barrier_in");
        let to: Vec<ClientId> = out
            .iter()
            .map(|o| match o {
                Output::Send { to, data } if data == "cmd=barrier_out\n" => *to,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            to,
            vec![A, B, C],
            "barrier_out to every rank, in rank order"
        );
        assert_eq!(s.barrier_waiting(), 0);
        // And the next barrier starts from zero.
        assert!(feed(&mut s, A, "cmd=barrier_in").is_empty());
    }

    #[test]
    fn finalize_and_abort_are_reported() {
        let mut s = server(2);
        s.add_client(A, Some(0)).unwrap();
        s.add_client(B, Some(1)).unwrap();
        let out = feed(&mut s, A, "cmd=finalize");
        assert_eq!(
            out,
            vec![
                Output::Send {
                    to: A,
                    data: "cmd=finalize_ack\n".into()
                },
                Output::Finalized {
                    client: A,
                    rank: Some(0)
                }
            ]
        );
        let out = feed(&mut s, B, "cmd=abort exitcode=7");
        assert_eq!(
            out,
            vec![Output::Abort {
                from: B,
                rank: Some(1),
                code: 7,
                message: None
            }]
        );
        let out = feed(&mut s, B, "cmd=abort exitcode=x error_msg=boom");
        assert!(matches!(
            out.as_slice(),
            [Output::Abort { code: 1, message: Some(m), .. }] if m == "boom"
        ));
    }

    #[test]
    fn a_rank_lost_before_finalize_fails_a_waiting_barrier() {
        let mut s = server(2);
        s.add_client(A, Some(0)).unwrap();
        s.add_client(B, Some(1)).unwrap();
        assert!(feed(&mut s, A, "cmd=barrier_in").is_empty());
        s.handle_disconnect(B).unwrap();
        match s.poll_output() {
            Some(Output::Failed { message }) => assert!(message.contains("rank 1"), "{message}"),
            other => panic!("expected Failed, got {other:?}"),
        }
    }

    #[test]
    fn a_barrier_entered_after_a_rank_is_lost_fails() {
        let mut s = server(2);
        s.add_client(A, Some(0)).unwrap();
        s.add_client(B, Some(1)).unwrap();
        s.handle_disconnect(B).unwrap();
        assert!(s.poll_output().is_none(), "nobody waits yet");
        let out = feed(&mut s, A, "cmd=barrier_in");
        assert!(
            matches!(out.as_slice(), [Output::Failed { message }] if message.contains("rank 1"))
        );
    }

    #[test]
    fn finalizing_while_others_wait_in_a_barrier_fails_the_job() {
        let mut s = server(2);
        s.add_client(A, Some(0)).unwrap();
        s.add_client(B, Some(1)).unwrap();
        assert!(feed(&mut s, A, "cmd=barrier_in").is_empty());
        let out = feed(&mut s, B, "cmd=finalize");
        assert!(matches!(
            out.last(),
            Some(Output::Failed { message }) if message.contains("rank 1 finalized")
        ));

        let mut s = server(2);
        s.add_client(A, Some(0)).unwrap();
        s.add_client(B, Some(1)).unwrap();
        feed(&mut s, B, "cmd=finalize");
        let out = feed(&mut s, A, "cmd=barrier_in");
        assert!(matches!(
            out.as_slice(),
            [Output::Failed { message }] if message.contains("rank 1 already finalized")
        ));
    }

    #[test]
    fn a_finalized_rank_may_leave() {
        let mut s = server(2);
        s.add_client(A, Some(0)).unwrap();
        s.add_client(B, Some(1)).unwrap();
        feed(&mut s, B, "cmd=finalize");
        s.handle_disconnect(B).unwrap();
        assert!(feed(&mut s, A, "cmd=finalize").len() == 2);
        assert!(s.poll_output().is_none());
    }

    #[test]
    fn malformed_and_unknown_commands_get_error_replies() {
        let mut s = server(1);
        s.add_client(A, Some(0)).unwrap();
        s.handle_malformed(A, &WireError::BareToken { offset: 0 })
            .unwrap();
        let Some(Output::Send { to, data }) = s.poll_output() else {
            panic!("no reply")
        };
        assert_eq!(to, A);
        let r = cmd(&data);
        assert_eq!((r.name(), r.get("rc")), ("error", Some("-1")));
        assert!(r.get("msg").unwrap().starts_with("malformed_PMI_line"));
        let r = ask(&mut s, A, "cmd=frobnicate x=1");
        assert_eq!(r.get("msg"), Some("unknown_command_frobnicate"));
    }

    #[test]
    fn spawn_is_refused_cleanly() {
        let mut s = server(1);
        s.add_client(A, Some(0)).unwrap();
        let spawn = Command::new_multi("spawn").with("nprocs", "1");
        s.handle_command(A, &spawn).unwrap();
        let Some(Output::Send { data, .. }) = s.poll_output() else {
            panic!("no reply")
        };
        let r = cmd(&data);
        assert_eq!((r.name(), r.get("rc")), ("spawn_result", Some("-1")));
    }

    /// Feeds one line from a connection that is refused: the error reply, then `Refused`.
    fn refused(s: &mut Server, from: ClientId, line: &str) -> (Command, String) {
        match feed(s, from, line).as_slice() {
            [Output::Send { to, data }, Output::Refused { client, reason }]
                if *to == from && *client == from =>
            {
                (cmd(data), reason.clone())
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn port_clients_get_their_rank_from_initack() {
        let mut s = server(2);
        s.add_client(A, None).unwrap();
        s.add_client(B, None).unwrap();
        let out = feed(&mut s, A, "cmd=initack pmiid=1");
        assert_eq!(
            out,
            vec![Output::Send {
                to: A,
                data: "cmd=initack\ncmd=set size=2\ncmd=set rank=1\ncmd=set debug=0\n".into()
            }]
        );
        assert_eq!(s.rank_of(A), Some(1));
        assert!(!s.all_ranks_held());
        // Once identified, the rank may ask again (and get the same answer) or anything else.
        assert_eq!(feed(&mut s, A, "cmd=initack pmiid=1").len(), 1);
        assert_eq!(ask(&mut s, A, "cmd=get_rank").get("rank"), Some("1"));
        // The same pmiid twice, or out of range, or none: refused, and the connection goes.
        for bad in ["cmd=initack pmiid=1", "cmd=initack pmiid=2", "cmd=initack"] {
            let mut s2 = server(2);
            s2.add_client(A, None).unwrap();
            s2.add_client(B, None).unwrap();
            assert_eq!(feed(&mut s2, A, "cmd=initack pmiid=1").len(), 1);
            let (reply, _) = refused(&mut s2, B, bad);
            assert_eq!(reply.get("rc"), Some("-1"), "{bad}");
            assert_eq!(s2.rank_of(B), None);
        }
        assert_eq!(feed(&mut s, B, "cmd=initack pmiid=0").len(), 1);
        assert!(s.all_ranks_held());
    }

    /// A connection that has not said which rank it is (a stray process that found the
    /// launcher's port) is refused whatever it sends first: it cannot read the job's key-value
    /// space, write it, enter a barrier or abort the job, and the job does not notice.
    #[test]
    fn an_unidentified_connection_may_only_say_initack() {
        let mut s = server(2);
        s.add_client(A, Some(0)).unwrap();
        assert_eq!(
            ask(
                &mut s,
                A,
                "cmd=put kvsname=kvs_test key=ch4-job-key value=secret"
            )
            .get("rc"),
            Some("0")
        );
        for line in [
            "cmd=get kvsname=kvs_test key=ch4-job-key",
            "cmd=put kvsname=kvs_test key=ch4-job-key value=mine",
            "cmd=get_my_kvsname",
            "cmd=init pmi_version=1 pmi_subversion=1",
            "cmd=barrier_in",
            "cmd=abort exitcode=9",
            "cmd=finalize",
            "cmd=watch_peers",
            "cmd=get_rank",
        ] {
            s.add_client(B, None).unwrap();
            let (reply, reason) = refused(&mut s, B, line);
            assert_eq!(reply.get("rc"), Some("-1"), "{line}");
            assert!(!reply.to_wire().unwrap().contains("secret"), "{line}");
            assert!(!reason.contains("secret"), "{line}");
            s.handle_disconnect(B).unwrap();
            assert!(std::iter::from_fn(|| s.poll_output()).next().is_none());
        }
        // A malformed line too.
        s.add_client(B, None).unwrap();
        s.handle_malformed(B, &WireError::Empty).unwrap();
        assert!(matches!(
            std::iter::from_fn(|| s.poll_output()).last(),
            Some(Output::Refused { client: B, .. })
        ));
        s.handle_disconnect(B).unwrap();
        // The key-value space is as rank 0 left it.
        assert_eq!(s.kvs_get("ch4-job-key"), Some("secret"));
        assert_eq!(s.barrier_waiting(), 0);
    }

    /// With port ids drawn by the launcher, a rank's number is not enough to join: only the
    /// id the launcher gave that rank is, and a wrong one is refused without saying which are
    /// right.
    #[test]
    fn with_port_ids_only_the_ids_given_out_join() {
        let ids = vec![1_234_567_891, 987_654_321, 555_555_555];
        let mut cfg = JobConfig::single_node(3);
        cfg.kvsname = "kvs_test".into();
        cfg.port_ids = Some(ids.clone());
        let mut s = Server::new(cfg).unwrap();
        for (client, guess) in [(A, "0"), (B, "1"), (C, "1234567890")] {
            s.add_client(client, None).unwrap();
            let (reply, reason) = refused(&mut s, client, &format!("cmd=initack pmiid={guess}"));
            assert_eq!(reply.get("rc"), Some("-1"));
            for id in &ids {
                let id = id.to_string();
                assert!(!reply.to_wire().unwrap().contains(&id) && !reason.contains(&id));
            }
            s.handle_disconnect(client).unwrap();
        }
        for (rank, id) in ids.iter().enumerate().rev() {
            let client = ClientId(100 + rank as u64);
            s.add_client(client, None).unwrap();
            let out = feed(&mut s, client, &format!("cmd=initack pmiid={id}"));
            let [Output::Send { data, .. }] = out.as_slice() else {
                panic!("{out:?}");
            };
            assert!(data.contains(&format!("cmd=set rank={rank}\n")), "{data}");
        }
        assert!(s.all_ranks_held());
        // A second connection with a right id finds the rank held.
        s.add_client(A, None).unwrap();
        refused(&mut s, A, &format!("cmd=initack pmiid={}", ids[1]));
        // Ids that are not one per rank, or repeat, or do not fit MPICH's int, are refused.
        for bad in [vec![1, 2], vec![1, 1, 2], vec![1, 2, 1 << 31]] {
            let mut cfg = JobConfig::single_node(3);
            cfg.port_ids = Some(bad);
            assert!(Server::new(cfg).is_err());
        }
    }

    #[test]
    fn registration_errors() {
        let mut s = server(2);
        s.add_client(A, Some(0)).unwrap();
        assert!(s.add_client(A, Some(1)).is_err());
        assert!(s.add_client(B, Some(0)).is_err());
        assert!(s.add_client(B, Some(2)).is_err());
        assert!(s.handle_command(C, &cmd("cmd=get_maxes")).is_err());
        assert!(s.handle_disconnect(C).is_err());
        assert!(Server::new(JobConfig {
            size: 0,
            ..JobConfig::single_node(1)
        })
        .is_err());
        assert!(Server::new(JobConfig {
            kvsname: "has space".into(),
            ..JobConfig::single_node(1)
        })
        .is_err());
    }

    #[test]
    fn messages_are_sanitized() {
        assert_eq!(sanitize_msg("a b\nc"), "a_b_c");
        assert_eq!(sanitize_msg(&"x".repeat(5000)).len(), MAX_VALUE_LEN);
    }

    #[test]
    fn watchers_hear_of_ranks_that_leave_or_fail_and_others_do_not() {
        let mut s = server(3);
        s.add_client(A, Some(0)).unwrap();
        s.add_client(B, Some(1)).unwrap();
        let c = ClientId(3);
        s.add_client(c, Some(2)).unwrap();
        assert_eq!(ask(&mut s, A, "cmd=watch_peers").name(), "watching");
        // Rank 2 finalizes: A is told it left; B (not watching) is told nothing.
        let out = feed(&mut s, c, "cmd=finalize");
        let to_a: Vec<_> = out
            .iter()
            .filter_map(|o| match o {
                Output::Send { to, data } if *to == A => Some(cmd(data)),
                _ => None,
            })
            .collect();
        assert_eq!(to_a.len(), 1, "{out:?}");
        assert_eq!(to_a[0].name(), "peer_event");
        assert_eq!(to_a[0].get("rank"), Some("2"));
        assert_eq!(to_a[0].get("state"), Some("left"));
        assert!(!out
            .iter()
            .any(|o| matches!(o, Output::Send { to, .. } if *to == B)));
        // Rank 1 dies: A is told it failed.
        s.handle_disconnect(B).unwrap();
        let out: Vec<_> = std::iter::from_fn(|| s.poll_output()).collect();
        match out.as_slice() {
            [Output::Send { to, data }] if *to == A => {
                let ev = cmd(data);
                assert_eq!(ev.get("rank"), Some("1"));
                assert_eq!(ev.get("state"), Some("failed"));
            }
            other => panic!("expected one event for A, got {other:?}"),
        }
    }

    #[test]
    fn a_late_watcher_hears_what_already_happened() {
        let mut s = server(3);
        s.add_client(A, Some(0)).unwrap();
        s.add_client(B, Some(1)).unwrap();
        let c = ClientId(3);
        s.add_client(c, Some(2)).unwrap();
        feed(&mut s, c, "cmd=finalize");
        s.handle_disconnect(B).unwrap();
        while s.poll_output().is_some() {}
        let out = feed(&mut s, A, "cmd=watch_peers");
        let lines: Vec<Command> = out
            .iter()
            .map(|o| match o {
                Output::Send { to, data } if *to == A => cmd(data),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0].name(), "watching");
        assert_eq!(
            (lines[1].get("rank"), lines[1].get("state")),
            (Some("2"), Some("left"))
        );
        assert_eq!(
            (lines[2].get("rank"), lines[2].get("state")),
            (Some("1"), Some("failed"))
        );
    }
}
