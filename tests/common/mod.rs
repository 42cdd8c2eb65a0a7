//! Shared harness: run one SPMD test body over every route configuration of the device.
//!
//! - `shm`: all ranks on one node, everything through the shared-memory layer (rendezvous data
//!   read with one copy, CMA, however many CPUs the host has);
//! - `shm_streamed`: the same with single-copy reads off, so rendezvous data streams through
//!   the rings;
//! - `shm_crowded`: the same set up like a crowded node, scaled down — 4 KiB rings that take
//!   only records of up to 48 bytes (the smallest eager messages and control packets), four
//!   512-byte cells per rank for the rest — so messages of a pair alternate between ring, cells
//!   and the local wait queue, and must still arrive in order;
//! - `net_am`: one rank per node, everything through the active-message netmod;
//! - `tcp`: one rank per node, everything through the TCP netmod over loopback sockets;
//! - `tcp_processes`: the same with every rank a process under `ch4run` (the ignored `rank`
//!   test is what each process runs);
//! - `mixed_processes`: processes on nodes of two (at least three ranks, so there is more than
//!   one node): shared memory within a node, TCP between nodes;
//! - `two_hosts`: processes on two hosts (network namespaces of this machine) joined by two
//!   links, launched by Hydra as on a cluster, TCP striping over both rails between them;
//! - `native_mixed`: two ranks per node with the natively matching netmod, so shm, native
//!   matching and the ANY_SOURCE partner logic all take part.
//!
//! The thresholds are tiny (eager 64 bytes, AM payload 100 bytes, eager credit 2 KiB) so that
//! small test messages already cross the eager/rendezvous boundary, rendezvous data moves in
//! several pieces, and flow control holds senders back.

#![allow(dead_code)]

pub mod c_programs;
pub mod faults;
pub mod hosts;
pub mod jobs;

use ch4::threads::Threads;

/// Eager threshold used by the route tests.
pub const EAGER: usize = 64;

/// Eager credit of the route tests: a dozen small messages in flight per pair, so that sends
/// switch between eager and waiting (blocking) or rendezvous (nonblocking) all the time.
pub const CREDIT: usize = 2048;

pub fn small(ranks: u32) -> Threads {
    let config = ch4::DeviceConfig {
        eager_credit: CREDIT,
        ..ch4::DeviceConfig::default()
    };
    Threads::new(ranks)
        .eager_limit(EAGER)
        .max_payload(100)
        .device_config(config)
}

/// Generates `shm`, `shm_streamed`, `shm_crowded`, `net_am`, `tcp`, `tcp_rails`, `tcp_processes`, `mixed_processes` and `native_mixed` tests that run `$body(ctx)` on `$ranks` ranks
/// (and with `processes = n`, `tcp_processes_wide`: the body on `n` processes over TCP).
#[macro_export]
macro_rules! on_all_routes {
    ($name:ident, $ranks:expr, $body:path $(, processes = $processes:expr)?) => {
        on_all_routes!(@at ch4::Single, $name, $ranks, $body $(, processes = $processes)?);
    };
    (@at $level:path, $name:ident, $ranks:expr, $body:path $(, processes = $processes:expr)?) => {
        mod $name {
            use super::*;

            #[test]
            fn shm() {
                common::small($ranks)
                    .thread_level($level)
                    .ranks_per_node($ranks)
                    .shm_single_copy(true)
                    .run(|ctx| $body(ctx))
                    .unwrap();
            }

            #[test]
            fn shm_streamed() {
                common::small($ranks)
                    .thread_level($level)
                    .ranks_per_node($ranks)
                    .shm_single_copy(false)
                    .run(|ctx| $body(ctx))
                    .unwrap();
            }

            #[test]
            fn shm_crowded() {
                common::small($ranks)
                    .thread_level($level)
                    .ranks_per_node($ranks)
                    .shm_geometry(shm::Geometry {
                        ring_capacity: 4096,
                        cell_size: 512,
                        cells_per_rank: 4,
                    })
                    .shm_ring_record_max(48)
                    .run(|ctx| $body(ctx))
                    .unwrap();
            }

            #[test]
            fn net_am() {
                common::small($ranks)
                    .thread_level($level)
                    .ranks_per_node(1)
                    .run_with::<inproc::InprocNet<inproc::AmOnly>, _, _>(|ctx| $body(ctx))
                    .unwrap();
            }

            #[cfg(feature = "tcp")]
            #[test]
            fn tcp() {
                common::small($ranks)
                    .thread_level($level)
                    .ranks_per_node(1)
                    .run_with::<netmod_tcp::TcpNetmod, _, _>(|ctx| $body(ctx))
                    .unwrap();
            }

            /// The same over two TCP rails (two loopback addresses): rendezvous data in
            /// pieces striped over both, envelopes on the first.
            #[cfg(feature = "tcp")]
            #[test]
            fn tcp_rails() {
                common::small($ranks)
                    .thread_level($level)
                    .ranks_per_node(1)
                    .rails("127.0.0.1,127.0.0.2")
                    .run_with::<netmod_rails::TcpRails, _, _>(|ctx| $body(ctx))
                    .unwrap();
            }

            /// The same through the seeded fault wrapper over TCP, every rank its own node:
            /// arrivals delayed, and on odd seeds overtaking each other (`common::faults`).
            #[cfg(feature = "tcp")]
            #[test]
            fn faults_tcp() {
                common::faults::each_seed(concat!(module_path!(), "::faults_tcp"), |run| {
                    let job = common::small($ranks).thread_level($level).ranks_per_node(1);
                    type Net = netmod_tcp::TcpNetmod;
                    if run.seed % 2 == 0 {
                        job.run_wrapped::<Net, shm::ShmTransport, _, _, _, _, _>(
                            move |rank, vci, net, shm| {
                                (run.ordered(net, rank, vci), shm)
                            },
                            |ctx| $body(ctx),
                        )
                        .map(drop)
                    } else {
                        job.run_wrapped::<Net, shm::ShmTransport, _, _, _, _, _>(
                            move |rank, vci, net, shm| {
                                (run.unordered(net, rank, vci), shm)
                            },
                            |ctx| $body(ctx),
                        )
                        .map(drop)
                    }
                });
            }

            /// The same through the seeded fault wrapper over the shared-memory rings, every
            /// rank on one node (single-copy reads on).
            #[test]
            fn faults_shm() {
                common::faults::each_seed(concat!(module_path!(), "::faults_shm"), |run| {
                    let job = common::small($ranks)
                        .thread_level($level)
                        .ranks_per_node($ranks)
                        .shm_single_copy(true);
                    type Net = ch4_core::transport::NoNetmod;
                    if run.seed % 2 == 0 {
                        job.run_wrapped::<Net, shm::ShmTransport, _, _, _, _, _>(
                            move |rank, vci, net, shm| {
                                (net, run.ordered(shm, rank, vci))
                            },
                            |ctx| $body(ctx),
                        )
                        .map(drop)
                    } else {
                        job.run_wrapped::<Net, shm::ShmTransport, _, _, _, _, _>(
                            move |rank, vci, net, shm| {
                                (net, run.unordered(shm, rank, vci))
                            },
                            |ctx| $body(ctx),
                        )
                        .map(drop)
                    }
                });
            }

            /// The same body with every rank a process of its own node, over real TCP.
            #[cfg(all(feature = "tcp", not(any(feature = "ofi", feature = "ucx"))))]
            #[test]
            fn tcp_processes() {
                common::jobs::processes_over_tcp(module_path!(), $ranks);
            }

            /// The same on two hosts (network namespaces) joined by two rate-limited links,
            /// launched by Hydra, over both rails: shared memory within a host.
            #[cfg(all(feature = "tcp", not(any(feature = "ofi", feature = "ucx"))))]
            #[test]
            fn two_hosts() {
                common::jobs::on_two_hosts(
                    module_path!(),
                    ($ranks).max(4),
                    common::hosts::Network::TcpRails,
                );
            }

            /// The same on two hosts over libfabric (`tcp;ofi_rxm` on the first link).
            #[cfg(feature = "ofi")]
            #[test]
            fn two_hosts_ofi() {
                common::jobs::on_two_hosts(
                    module_path!(),
                    ($ranks).max(4),
                    common::hosts::Network::Ofi,
                );
            }

            /// The same on two hosts over UCX (its tcp transport on the first link).
            #[cfg(feature = "ucx")]
            #[test]
            fn two_hosts_ucx() {
                common::jobs::on_two_hosts(
                    module_path!(),
                    ($ranks).max(4),
                    common::hosts::Network::Ucx,
                );
            }

            /// The same as processes on nodes of two: shared memory within, TCP between.
            #[cfg(all(feature = "tcp", not(any(feature = "ofi", feature = "ucx"))))]
            #[test]
            fn mixed_processes() {
                common::jobs::processes_on_nodes_of(module_path!(), ($ranks).max(3), 2);
            }

            $(
                /// The same over TCP with more processes (up to the eight).
                #[cfg(all(feature = "tcp", not(any(feature = "ofi", feature = "ucx"))))]
                #[test]
                fn tcp_processes_wide() {
                    common::jobs::processes_over_tcp(module_path!(), $processes);
                }
            )?

            #[cfg(any(feature = "tcp", feature = "ofi", feature = "ucx"))]
            #[test]
            #[ignore = "one rank of a process job: tcp_processes starts it"]
            fn rank() {
                common::jobs::as_rank_at($level, |ctx| $body(ctx));
            }

            /// Every rank a thread on a node of its own, over libfabric (`FI_PROVIDER`, else
            /// the best provider): the provider matches.
            #[cfg(feature = "ofi")]
            #[test]
            fn ofi() {
                common::small($ranks)
                    .thread_level($level)
                    .ranks_per_node(1)
                    .run_with::<netmod_ofi::OfiNetmod, _, _>(|ctx| $body(ctx))
                    .unwrap();
            }

            /// Threads on nodes of two: ch4's shared memory within, libfabric between.
            #[cfg(feature = "ofi")]
            #[test]
            fn ofi_mixed() {
                common::small($ranks)
                    .thread_level($level)
                    .ranks_per_node(2)
                    .run_with::<netmod_ofi::OfiNetmod, _, _>(|ctx| $body(ctx))
                    .unwrap();
            }

            /// Every rank a process of its own node, over libfabric.
            #[cfg(feature = "ofi")]
            #[test]
            fn ofi_processes() {
                common::jobs::processes_over_tcp(module_path!(), $ranks);
            }

            /// Processes on nodes of two: shared memory within, libfabric between.
            #[cfg(feature = "ofi")]
            #[test]
            fn ofi_mixed_processes() {
                common::jobs::processes_on_nodes_of(module_path!(), ($ranks).max(3), 2);
            }

            /// Every rank a thread on a node of its own, over UCX (configured by `UCX_*` as
            /// UCX programs are): UCX matches.
            #[cfg(feature = "ucx")]
            #[test]
            fn ucx() {
                common::small($ranks)
                    .thread_level($level)
                    .ranks_per_node(1)
                    .run_with::<netmod_ucx::UcxNetmod, _, _>(|ctx| $body(ctx))
                    .unwrap();
            }

            /// Threads on nodes of two: ch4's shared memory within, UCX between.
            #[cfg(feature = "ucx")]
            #[test]
            fn ucx_mixed() {
                common::small($ranks)
                    .thread_level($level)
                    .ranks_per_node(2)
                    .run_with::<netmod_ucx::UcxNetmod, _, _>(|ctx| $body(ctx))
                    .unwrap();
            }

            /// Every rank a process of its own node, over UCX (when it is process mode's
            /// network: built without `ofi`).
            #[cfg(all(feature = "ucx", not(feature = "ofi")))]
            #[test]
            fn ucx_processes() {
                common::jobs::processes_over_tcp(module_path!(), $ranks);
            }

            /// Processes on nodes of two: shared memory within, UCX between.
            #[cfg(all(feature = "ucx", not(feature = "ofi")))]
            #[test]
            fn ucx_mixed_processes() {
                common::jobs::processes_on_nodes_of(module_path!(), ($ranks).max(3), 2);
            }

            /// Every rank on a node of its own: all traffic through the natively matching
            /// mock NIC (asynchronous completions, "try again" on a full queue).
            #[test]
            fn native() {
                common::small($ranks)
                    .thread_level($level)
                    .ranks_per_node(1)
                    .run_with::<inproc::InprocNet<inproc::Native>, _, _>(|ctx| $body(ctx))
                    .unwrap();
            }

            #[test]
            fn native_mixed() {
                common::small($ranks)
                    .thread_level($level)
                    .ranks_per_node(2)
                    .run_with::<inproc::InprocNet<inproc::Native>, _, _>(|ctx| $body(ctx))
                    .unwrap();
            }
        }
    };
}

/// [`on_all_routes`] for a body that runs several threads per rank: every rank starts at
/// `MPI_THREAD_MULTIPLE` (with the default number of VCIs).
#[macro_export]
macro_rules! on_all_routes_multiple {
    ($name:ident, $ranks:expr, $body:path $(, processes = $processes:expr)?) => {
        on_all_routes!(@at ch4::Multiple, $name, $ranks, $body $(, processes = $processes)?);
    };
}

/// A recognizable byte pattern for message `seq` of length `len`.
pub fn pattern(seq: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq * 31 + i * 7) as u8).collect()
}
