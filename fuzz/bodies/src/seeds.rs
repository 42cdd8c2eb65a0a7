//! The seeds of every target: honest traffic in each body's input format, from which the
//! fuzzer mutates (`tests/regressions.rs`'s `write_seeds` puts them in `fuzz/regressions/`).

use am_fallback::wire::{handler, EagerHeader, MatchHeader};
use netmod_tcp::frame;
use pmi::wire::Command;

/// A TCP frame as a peer writes it.
fn tcp_frame(h: u8, header: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = frame::encode(h, header.len(), payload.len()).to_vec();
    v.extend(header);
    v.extend(payload);
    v
}

/// The frames of an eager message, a request-to-send and a goodbye, as rank 1 sends them.
fn tcp_stream() -> Vec<u8> {
    let e = EagerHeader {
        context: 0,
        source: 1,
        tag: 7,
        flags: 0,
    };
    let m = MatchHeader {
        context: 0,
        source: 1,
        tag: 7,
        flags: 0,
        seq: 0,
        reserved: 0,
        sreq: 3,
        total: 100_000,
    };
    let mut v = tcp_frame(handler::EAGER_SHORT, bytemuck::bytes_of(&e), b"abc");
    v.extend(tcp_frame(handler::RTS, bytemuck::bytes_of(&m), &[]));
    v.extend(frame::encode_control(frame::LEAVING));
    v
}

fn line(cmd: Command) -> Vec<u8> {
    cmd.to_wire().expect("a seed formats").into_bytes()
}

/// Seeds per target.
pub fn all() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let stream = tcp_stream();
    let mut connection = vec![0u8];
    connection.extend(&stream);
    let mut stranger = vec![1u8];
    stranger.extend(crate::tcp::hello());
    stranger[9] ^= 1; // another job's key
    let init = line(
        Command::new("init")
            .with("pmi_version", "1")
            .with("pmi_subversion", "1"),
    );
    let mut server = vec![2u8]; // a job of three
    for c in 0..3u8 {
        for l in [
            init.clone(),
            line(Command::new("get_maxes")),
            line(Command::new("get_my_kvsname")),
            line(Command::new("get_rank")),
            line(
                Command::new("put")
                    .with("kvsname", "kvs_fuzz_0")
                    .with("key", format!("card-{c}"))
                    .with("value", "0a0b"),
            ),
            line(Command::new("barrier_in")),
            line(
                Command::new("get")
                    .with("kvsname", "kvs_fuzz_0")
                    .with("key", "card-0"),
            ),
            line(Command::new("finalize")),
        ] {
            server.push(c);
            server.push(l.len() as u8);
            server.extend(l);
        }
    }
    let replies1 = [
        "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n",
        "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n",
        "cmd=my_kvsname rc=0 kvsname=kvs_1_0\n",
        "cmd=barrier_out rc=0\n",
        "cmd=get_result rc=0 value=0a0b\n",
        "cmd=finalize_ack rc=0\n",
    ]
    .concat();
    let mut client1 = vec![2u8, 3, 7, 6, 11];
    client1.extend(replies1.as_bytes());
    let v2 = |body: &str| format!("{:<6}{body}", body.len());
    let replies2 = [
        "cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n".to_string(),
        v2("cmd=fullinit-response;rc=0;rank=0;size=2;appnum=0;debugged=FALSE;pmiverbose=FALSE;"),
        v2("cmd=job-getid-response;rc=0;jobid=job7;"),
        v2("cmd=kvs-fence-response;rc=0;"),
        v2("cmd=finalize-response;rc=0;"),
    ]
    .concat();
    let mut client2 = vec![3u8 | 4 | 8, 2, 7, 11];
    client2.extend(replies2.as_bytes());
    let mut ring = vec![0u8];
    for (h, hl, pl) in [(1u8, 16u8, 8u16), (11, 16, 40), (4, 16, 1000)] {
        ring.extend([0, h, hl]);
        ring.extend(vec![0x11; hl as usize]);
        ring.extend(pl.to_le_bytes());
        ring.extend([2, 3]);
    }
    ring.extend([3, 0, 0, 7, 0xFF]);
    ring.extend([2, 3]);
    let mut cells = vec![0u8];
    for from in [0u8, 1, 0] {
        cells.extend([0, from, 1, 16]);
        cells.extend([0x22; 16]);
        cells.push(40);
    }
    cells.extend([2, 7, 4, 0, 0]);
    cells.extend(9u64.to_le_bytes());
    cells.extend([2, 3]);
    let tcp_cards = {
        let mut v = vec![0u8];
        for c in ["127.0.0.1:1", "10.0.0.2:4000", "[::1]:5", "host:1"] {
            v.push(c.len() as u8);
            v.extend(c.as_bytes());
        }
        v
    };
    let rails_card = vec![1u8, 9, 2, 3, 0, b'a', b'b', b'c', 1, 0, b'x'];
    let any_card = vec![2u8, 4, 1, b'1', b':', b'2'];
    // Two sockaddr_in (AF_INET, a port, 127.0.0.1) for tcp; a NUL-terminated name for shm.
    let sin = |port: u16| {
        let mut a = vec![2u8, 0];
        a.extend(port.to_be_bytes());
        a.extend([127, 0, 0, 1]);
        a.extend([0; 8]);
        a
    };
    let ofi_tcp = [vec![2u8, 16], sin(4000), vec![16], sin(4001)].concat();
    let ofi_shm = [&[1u8, 14][..], b"fi_shm://4242\0"].concat();
    vec![
        (
            "am_headers",
            vec![
                [vec![handler::EAGER, 8, 0], vec![0; 40]].concat(),
                [vec![handler::EAGER_SHORT, 3, 0], vec![0; 16]].concat(),
                [vec![handler::RTS_GET, 0, 0], vec![1; 48]].concat(),
            ],
        ),
        ("am_packets", crate::am::packet_seeds()),
        (
            "tcp_frames",
            vec![
                [vec![200, 0], stream.clone()].concat(),
                [vec![0, 3, 1, 2, 5], stream].concat(),
            ],
        ),
        ("tcp_connection", vec![connection, stranger]),
        (
            "pmi1_wire",
            vec![
                [
                    vec![0],
                    init.clone(),
                    b"mcmd=spawn\nnprocs=1\nendcmd\n".to_vec(),
                ]
                .concat(),
                [vec![2, 5, 1], line(Command::new("get").with("key", "k"))].concat(),
            ],
        ),
        (
            "pmi2_wire",
            vec![[
                vec![1, 4],
                pmi::wire2::encode(&Command::new("kvs-put").with("key", "k").with("value", "v"))
                    .expect("encodes"),
            ]
            .concat()],
        ),
        ("pmi_server", vec![server]),
        ("pmi_client", vec![client1, client2]),
        (
            "pmi_values",
            vec![
                [&[1u8, 8, 0][..], b"(vector,(0,2,2),(2,1,4))"].concat(),
                [&[0u8, 0, 0][..], b"0a0B"].concat(),
            ],
        ),
        ("shm_ring", vec![ring]),
        ("shm_cells", vec![cells]),
        ("business_cards", vec![tcp_cards, rails_card, any_card]),
        ("ofi_names", vec![ofi_tcp, ofi_shm]),
        (
            "ofi_large",
            vec![netmod_ofi::fuzzing::inline_stub_bytes(
                5,
                1 << 20,
                0x7f00_0000_1000,
                42,
            )],
        ),
        (
            "credit",
            vec![[
                netmod_ofi::tag::cq_data(3, 17).to_le_bytes().to_vec(),
                4u32.to_le_bytes().to_vec(),
            ]
            .concat()],
        ),
        (
            "datatypes",
            vec![
                vec![0, 4, 0, 3, 0, 8, 0, 5, 1],
                vec![1, 3, 10, 0, 4, 0, 0, 2, 20, 0, 3, 7, 9],
                vec![3, 2, 0, 0, 2, 4, 0, 2, 1],
            ],
        ),
        (
            "settings",
            vec![
                b"\x0064K".to_vec(),
                b"\x01on".to_vec(),
                b"\x02eth1@3, 10.2.0.0/16@1".to_vec(),
            ],
        ),
    ]
}
