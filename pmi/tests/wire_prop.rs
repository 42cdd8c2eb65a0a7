//! Property tests of the PMI-1 wire codec: it never panics on anything a peer can send, and
//! what it formats it parses back unchanged, however the bytes are split across reads.

use pmi::wire::{Command, Decoder, MAX_KEY_LEN};
use proptest::prelude::*;

/// Keys: printable ASCII without `=`, never the reserved `cmd` / `mcmd`.
fn key() -> impl Strategy<Value = String> {
    "[!-<>-~]{1,64}".prop_filter("reserved", |k| k != "cmd" && k != "mcmd")
}

/// Single-line values: no spaces, no control characters, any other Unicode.
fn line_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[!-~]{0,40}",
        "[^ \\p{Cc}]{0,40}",
        Just(String::new()),
        "[a-f0-9]{1000,1024}",
    ]
}

/// Multi-line values may also contain spaces.
fn block_value() -> impl Strategy<Value = String> {
    "[^\\p{Cc}]{0,60}"
}

fn command() -> impl Strategy<Value = Command> {
    let name = "[a-z_]{1,20}";
    prop_oneof![
        (name, proptest::collection::vec((key(), line_value()), 0..8)).prop_map(|(n, args)| {
            args.into_iter()
                .fold(Command::new(n), |c, (k, v)| c.with(k, v))
        }),
        (
            name,
            proptest::collection::vec((key(), block_value()), 0..8)
        )
            .prop_map(|(n, args)| {
                args.into_iter()
                    .fold(Command::new_multi(n), |c, (k, v)| c.with(k, v))
            }),
    ]
}

/// Text that looks enough like PMI to reach the parser's deeper branches.
fn pmi_ish() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("cmd=".to_string()),
            Just("mcmd=".to_string()),
            Just("endcmd".to_string()),
            Just("=".to_string()),
            Just(" ".to_string()),
            Just("\n".to_string()),
            Just("\r".to_string()),
            Just("\0".to_string()),
            "[a-z]{1,5}",
            "\\PC{1,3}",
            Just("k".repeat(MAX_KEY_LEN + 1)),
        ],
        0..40,
    )
    .prop_map(|parts| parts.concat())
}

/// Valid messages, then disturbed: single-line tokens shuffled and re-spaced, and sometimes a
/// PMI-ish fragment spliced in, so that both accepted and rejected near-misses occur.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    command()
        .prop_filter("valid", |c| c.validate().is_ok())
        .prop_flat_map(|c| {
            let wire = c.to_wire().unwrap_or_default();
            let tokens: Vec<String> = if c.is_multi() {
                vec![wire]
            } else {
                // Only the line end: values may end in Unicode spaces (U+00A0), which a
                // Unicode-aware trim would strip from the last token.
                wire.trim_end_matches('\n')
                    .split(' ')
                    .map(str::to_owned)
                    .collect()
            };
            (
                Just(tokens).prop_shuffle(),
                proptest::collection::vec(1usize..3, 16),
                proptest::option::weighted(0.3, (any::<prop::sample::Index>(), pmi_ish())),
            )
        })
        .prop_map(|(tokens, gaps, splice)| {
            let mut out = String::new();
            for (i, t) in tokens.iter().enumerate() {
                out.push_str(t);
                out.push_str(&" ".repeat(gaps[i % gaps.len()]));
            }
            let mut out = out.into_bytes();
            if let Some((at, junk)) = splice {
                let at = at.index(out.len() + 1);
                out.splice(at..at, junk.into_bytes());
            }
            out
        })
}

proptest! {
    #![proptest_config(ProptestConfig {
        max_global_rejects: 1 << 16,
        ..ProptestConfig::with_cases(256)
    })]

    #[test]
    fn parse_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..3000)) {
        let _ = Command::parse(&bytes);
    }

    #[test]
    fn parse_never_panics_on_pmi_like_text(s in pmi_ish()) {
        let _ = Command::parse(s.as_bytes());
    }

    /// Anything the parser accepts, the formatter reproduces in canonical form, and that form
    /// parses back to the same command.
    #[test]
    fn accepted_input_reformats_losslessly(bytes in mutated()) {
        if let Ok(c) = Command::parse(&bytes) {
            let wire = c.to_wire();
            prop_assert!(wire.is_ok(), "accepted {:?} but cannot format it: {:?}", bytes, wire);
            prop_assert_eq!(Command::parse(wire.unwrap().as_bytes()), Ok(c));
        }
    }

    /// Token order and spacing carry no meaning in a single line.
    #[test]
    fn shuffled_lines_parse_to_the_same_command(c in command(), seed in any::<u64>()) {
        prop_assume!(!c.is_multi() && c.validate().is_ok());
        let wire = c.to_wire().unwrap();
        let mut tokens: Vec<&str> = wire.trim_end_matches('\n').split(' ').collect();
        // Rotate the cmd= token to a seed-chosen position; argument order must stay.
        let cmd = tokens.remove(0);
        let at = (seed as usize) % (tokens.len() + 1);
        tokens.insert(at, cmd);
        let line = tokens.join("   ");
        // The extra spaces must not push a near-maximal line past the line limit, which
        // would rightly be refused.
        prop_assume!(line.len() < pmi::wire::MAX_LINE_LEN);
        prop_assert_eq!(Command::parse(line.as_bytes()), Ok(c));
    }

    #[test]
    fn format_then_parse_is_identity(c in command()) {
        prop_assume!(c.validate().is_ok());
        let wire = c.to_wire().unwrap();
        prop_assert_eq!(Command::parse(wire.as_bytes()), Ok(c));
    }

}

proptest! {
    // Building several commands of many arguments each is slow in debug builds.
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A stream of valid messages decodes to the same messages whatever the read boundaries.
    #[test]
    fn decoder_reassembles_any_split(
        cmds in proptest::collection::vec(command(), 1..6),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let cmds: Vec<Command> = cmds.into_iter().filter(|c| c.validate().is_ok()).collect();
        let stream: Vec<u8> = cmds.iter().flat_map(|c| c.to_wire().unwrap().into_bytes()).collect();
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        cuts.push(0);
        cuts.push(stream.len());
        cuts.sort_unstable();
        let mut d = Decoder::new();
        let mut out = Vec::new();
        for w in cuts.windows(2) {
            d.push(&stream[w[0]..w[1]]);
            while let Some(m) = d.next_message() {
                out.push(m.unwrap());
            }
        }
        prop_assert_eq!(out, cmds);
        prop_assert!(d.finish().is_ok());
    }

    /// Garbage between valid lines costs errors, never the valid lines after it.
    #[test]
    fn decoder_recovers_after_garbage(junk in proptest::collection::vec(any::<u8>(), 0..3000)) {
        let mut d = Decoder::new();
        let junk: Vec<u8> = junk.into_iter().filter(|&b| b != b'\n').collect();
        d.push(&junk);
        d.push(b"\ncmd=barrier_in\n");
        let mut last = None;
        while let Some(m) = d.next_message() {
            last = Some(m);
        }
        let last = last.unwrap().unwrap();
        prop_assert_eq!(last.name(), "barrier_in");
    }
}

/// Regression for the case proptest found: a value that is a single no-break space survives
/// formatting and parsing unchanged (the wire treats only ASCII space as a separator).
#[test]
fn a_no_break_space_value_round_trips() {
    let c = Command::new("_").with("A", "\u{a0}");
    let wire = c.to_wire().unwrap();
    assert_eq!(Command::parse(wire.as_bytes()).unwrap(), c);
}
