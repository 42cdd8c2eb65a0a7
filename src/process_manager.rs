//! The process manager a rank in process mode talks to: PMI-1 or PMI-2 (the `pmi` crate: ch4run,
//! Hydra, `srun --mpi=pmi2`) or PMIx (the `pmix` crate over OpenPMIx, with the `pmix` feature:
//! Open MPI's `mpirun`, PRRTE, `srun --mpi=pmix`), chosen from what the launcher put in the
//! environment. Bootstrap needs the same few things from each (rank and size, a key-value
//! store with a barrier, the node map, abort, failure notices); this enum gives them one face.
//! It is used at start-up and finalize only, never on the data path.

use ch4_core::{Error, ErrorKind, Result};

/// A rank's connection to its process manager.
pub(crate) enum ProcessManager {
    /// PMI-1 or PMI-2 (or a singleton, when nothing launched the process).
    Pmi(pmi::Client),
    /// PMIx, through the system library.
    #[cfg(feature = "pmix")]
    Pmix(pmix::Client),
}

fn pmi_err(e: pmi::Error) -> Error {
    Error::new(ErrorKind::Transport, format!("process manager: {e}"))
}

#[cfg(feature = "pmix")]
fn pmix_err(e: pmix::Error) -> Error {
    Error::new(ErrorKind::Transport, format!("process manager (PMIx): {e}"))
}

/// Whether a PMI launcher started this process (it set `PMI_FD` or `PMI_PORT`).
pub(crate) fn under_pmi() -> bool {
    std::env::var_os("PMI_FD").is_some() || std::env::var_os("PMI_PORT").is_some()
}

/// Whether a PMIx launcher started this process (it set `PMIX_NAMESPACE` and `PMIX_RANK`).
pub(crate) fn under_pmix() -> bool {
    std::env::var_os("PMIX_NAMESPACE").is_some() && std::env::var_os("PMIX_RANK").is_some()
}

impl ProcessManager {
    /// Joins the job of the launcher that started this process: PMI when it set PMI's
    /// variables (ch4run under an `mpirun` hands its ranks PMI, never the outer job's PMIx),
    /// else PMIx when it set PMIx's, else a PMI singleton (rank 0 of 1).
    ///
    /// # Errors
    ///
    /// The launcher's, and, when a PMIx launcher started a build without the `pmix` feature,
    /// an error that says so: running on as a singleton would make every rank rank 0.
    pub(crate) fn join() -> Result<ProcessManager> {
        if !under_pmi() && under_pmix() {
            #[cfg(feature = "pmix")]
            return pmix::Client::init()
                .map(ProcessManager::Pmix)
                .map_err(pmix_err);
            #[cfg(not(feature = "pmix"))]
            return Err(Error::new(
                ErrorKind::Transport,
                "started by a PMIx launcher (PMIX_NAMESPACE is set: Open MPI's mpirun, PRRTE, \
                 srun --mpi=pmix), but this build of ch4 has no PMIx client: build it with \
                 the `pmix` feature (needs libpmix-dev), or launch with srun --mpi=pmi2, \
                 mpiexec.hydra or ch4run",
            ));
        }
        let mut client = pmi::Client::from_env().map_err(pmi_err)?;
        client.init().map_err(pmi_err)?;
        Ok(ProcessManager::Pmi(client))
    }

    /// This process's rank.
    pub(crate) fn rank(&self) -> u32 {
        match self {
            ProcessManager::Pmi(c) => c.rank(),
            #[cfg(feature = "pmix")]
            ProcessManager::Pmix(c) => c.rank(),
        }
    }

    /// The job's size.
    pub(crate) fn size(&self) -> u32 {
        match self {
            ProcessManager::Pmi(c) => c.size(),
            #[cfg(feature = "pmix")]
            ProcessManager::Pmix(c) => c.size(),
        }
    }

    /// The job's name at its process manager (PMI's key-value space, PMIx's namespace):
    /// unique among the jobs that manager runs.
    pub(crate) fn job_name(&self) -> Result<String> {
        match self {
            ProcessManager::Pmi(c) => c.get_my_kvsname().map(str::to_string).map_err(pmi_err),
            #[cfg(feature = "pmix")]
            ProcessManager::Pmix(c) => Ok(c.namespace()),
        }
    }

    /// The longest value [`Self::put`] takes (PMI's `vallen_max`; PMIx has no such limit, and
    /// a business card of a few hundred bytes then goes in one value).
    pub(crate) fn max_value_len(&mut self) -> Result<usize> {
        match self {
            ProcessManager::Pmi(c) => c.get_maxes().map(|m| m.vallen_max).map_err(pmi_err),
            #[cfg(feature = "pmix")]
            ProcessManager::Pmix(_) => Ok(1 << 20),
        }
    }

    /// Publishes `value` under `key` as this rank's, visible to all after the next
    /// [`Self::barrier`].
    pub(crate) fn put(&mut self, key: &str, value: &str) -> Result<()> {
        match self {
            ProcessManager::Pmi(c) => c.put(key, value).map_err(pmi_err),
            #[cfg(feature = "pmix")]
            ProcessManager::Pmix(c) => c.put(key, value.as_bytes()).map_err(pmix_err),
        }
    }

    /// The value rank `publisher` put under `key` before a barrier (PMI's keys are the job's,
    /// so it ignores the publisher; PMIx's belong to the rank that put them).
    #[cfg_attr(not(feature = "pmix"), allow(unused_variables))]
    pub(crate) fn get(&mut self, publisher: u32, key: &str) -> Result<Option<String>> {
        match self {
            ProcessManager::Pmi(c) => c.get(key).map_err(pmi_err),
            #[cfg(feature = "pmix")]
            ProcessManager::Pmix(c) => match c.get(publisher, key).map_err(pmix_err)? {
                None => Ok(None),
                Some(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| {
                    Error::new(
                        ErrorKind::Transport,
                        format!("rank {publisher}'s {key:?} is not text"),
                    )
                }),
            },
        }
    }

    /// Waits for every rank of the job, publishing what each put (PMI barrier, PMIx commit
    /// and fence with data collection).
    pub(crate) fn barrier(&mut self) -> Result<()> {
        match self {
            ProcessManager::Pmi(c) => c.barrier().map_err(pmi_err),
            #[cfg(feature = "pmix")]
            ProcessManager::Pmix(c) => c.fence().map_err(pmix_err),
        }
    }

    /// The node of every rank, if the launcher says (PMI's `PMI_process_mapping`, PMIx's
    /// node ids or hostnames).
    pub(crate) fn node_ids(&mut self) -> Result<Option<Vec<u32>>> {
        match self {
            ProcessManager::Pmi(c) => c.node_ids().map_err(pmi_err),
            #[cfg(feature = "pmix")]
            ProcessManager::Pmix(c) => c.node_ids().map_err(pmix_err),
        }
    }

    /// Asks the launcher for notice of ranks that end; whether it will give any.
    pub(crate) fn watch_peers(&mut self) -> Result<bool> {
        match self {
            ProcessManager::Pmi(c) => c.watch_peers().map_err(pmi_err),
            #[cfg(feature = "pmix")]
            ProcessManager::Pmix(c) => c.watch_failures().map_err(pmix_err),
        }
    }

    /// Whether the launcher tells a rank when another *leaves in order*, so that finalize
    /// needs no barrier of its own: ch4run does; a PMIx server tells of failures (when it
    /// offers events at all), and Open MPI's ends the job on one, but not of ranks that
    /// finalize, so a PMIx job keeps the barrier.
    pub(crate) fn tells_who_left(&self) -> bool {
        match self {
            ProcessManager::Pmi(_) => true,
            #[cfg(feature = "pmix")]
            ProcessManager::Pmix(_) => false,
        }
    }

    /// What the launcher said, since the last call, about ranks that ended.
    pub(crate) fn poll_peer_events(&mut self) -> Result<Vec<pmi::PeerEvent>> {
        match self {
            ProcessManager::Pmi(c) => c.poll_peer_events().map_err(pmi_err),
            #[cfg(feature = "pmix")]
            ProcessManager::Pmix(c) => Ok(c
                .poll_peer_events()
                .into_iter()
                .map(|e| match e {
                    pmix::PeerEvent::Left(r) => pmi::PeerEvent::Left(r),
                    pmix::PeerEvent::Failed(r) => pmi::PeerEvent::Failed(r),
                })
                .collect()),
        }
    }

    /// Leaves the job in order.
    pub(crate) fn finalize(self) -> Result<()> {
        match self {
            ProcessManager::Pmi(mut c) => c.finalize().map_err(pmi_err),
            #[cfg(feature = "pmix")]
            ProcessManager::Pmix(c) => c.finalize().map_err(pmix_err),
        }
    }

    /// Ends the whole job with `code`; does not return.
    pub(crate) fn abort(&mut self, code: i32, message: &str) -> ! {
        match self {
            ProcessManager::Pmi(c) => c.abort(code, message),
            #[cfg(feature = "pmix")]
            ProcessManager::Pmix(c) => c.abort(code, message),
        }
    }
}
