//! The PMI-1 "simple" wire format: parsing and formatting of `cmd=NAME key=value ...` lines.
//!
//! This is the bottom layer of the crate: pure functions over bytes, no I/O, no state beyond the
//! framing buffer of [`Decoder`]. The [`client`](crate::client) and the
//! [`server`](crate::server) both speak through it, so a message that one formats the other parses.
//!
//! # The format
//!
//! A message is one line, `cmd=NAME` plus any number of `key=value` tokens separated by spaces,
//! ended by `\n`. MPICH's `simple_pmiutil.c` (client) and Hydra's `pmiserv` (server) look keys up
//! by name, so token order carries no meaning and a reader must accept keys it does not know;
//! both are true here. A token is split at its *first* `=`: `value=a=b` is key `value`, value
//! `a=b` (Hydra stores and returns such values intact). Values cannot contain spaces, because
//! the space is the token separator and PMI-1 has no escape that every peer understands.
//!
//! The one exception is `spawn`, sent as a multi-line block: `mcmd=spawn\n`, then one
//! `key=value` per line (values may contain spaces there), then `endcmd\n`. [`Decoder`] frames
//! such blocks so that a server can reject them cleanly instead of misreading each line as a
//! command.
//!
//! # Limits
//!
//! The limits are Hydra's (`pmi_common.h`: `MAXKEYLEN` 64, `MAXVALLEN` 1024, `MAXNAMELEN` 256,
//! and `get_maxes` answers `kvsname_max=256 keylen_max=64 vallen_max=1024`). simple_pmi's line
//! buffer `PMIU_MAXLINE` is 1024 bytes, but that cannot be the limit of the *protocol*: a `put`
//! of a maximal value is ~1.4 KB, and Hydra 4 itself answers a `get` of a 1024-byte value with a
//! 1062-byte line. [`MAX_LINE_LEN`] is therefore 2048, enough for the longest legal message
//! with room for unknown keys, and still small enough that a peer cannot make us buffer much.
//!
//! Parsing never panics and never allocates more than a bounded multiple of its input; every
//! malformed input yields a [`WireError`] saying what and where.

use std::fmt;

/// Longest key, in bytes, in a `key=value` token and in the key-value space (Hydra `MAXKEYLEN`).
pub const MAX_KEY_LEN: usize = 64;

/// Longest value, in bytes (Hydra `MAXVALLEN`, advertised as `vallen_max`).
pub const MAX_VALUE_LEN: usize = 1024;

/// Longest key-value-space name, in bytes (Hydra `MAXKVSNAME`, advertised as `kvsname_max`).
pub const MAX_KVSNAME_LEN: usize = 256;

/// Longest single-line message, in bytes, not counting the `\n` (see the module docs for why it
/// is larger than simple_pmi's 1024-byte buffer).
pub const MAX_LINE_LEN: usize = 2048;

/// Longest multi-line (`mcmd=`) block, in bytes, including its newlines and `endcmd`. Bounds
/// what a peer can make a [`Decoder`] buffer before the block is rejected.
pub const MAX_BLOCK_LEN: usize = 64 * 1024;

/// The line that ends a multi-line block.
const END_BLOCK: &str = "endcmd";

/// Why bytes are not a valid PMI-1 message, or why a [`Command`] cannot be formatted as one.
///
/// Offsets are byte offsets into the line (or block) being parsed, to point at the culprit
/// without echoing possibly huge or binary input back in error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// The message has no tokens at all.
    Empty,
    /// A line is longer than [`MAX_LINE_LEN`].
    LineTooLong {
        /// Length seen so far, in bytes.
        len: usize,
    },
    /// A multi-line block is longer than [`MAX_BLOCK_LEN`], or one of its lines is longer than
    /// [`MAX_LINE_LEN`].
    BlockTooLong {
        /// Length seen so far, in bytes.
        len: usize,
    },
    /// The input ended in the middle of a line or of a multi-line block.
    Truncated,
    /// The bytes are not UTF-8.
    NotUtf8 {
        /// Offset of the first invalid byte.
        offset: usize,
    },
    /// A control character (NUL, tab, CR, an embedded newline, DEL, ...) where none may be.
    ControlChar {
        /// Offset of the character.
        offset: usize,
    },
    /// A token without `=`.
    BareToken {
        /// Offset of the token.
        offset: usize,
    },
    /// A token starting with `=`.
    EmptyKey {
        /// Offset of the token.
        offset: usize,
    },
    /// A key with a character outside printable ASCII.
    BadKey {
        /// Offset of the token.
        offset: usize,
    },
    /// A key longer than [`MAX_KEY_LEN`].
    KeyTooLong {
        /// Length of the key, in bytes.
        len: usize,
    },
    /// A value longer than [`MAX_VALUE_LEN`].
    ValueTooLong {
        /// Length of the value, in bytes.
        len: usize,
    },
    /// A value containing a space, which only a multi-line block can carry.
    SpaceInValue {
        /// Offset of the token.
        offset: usize,
    },
    /// No `cmd=` (or, for a block, no leading `mcmd=`) token.
    MissingCmd,
    /// More than one `cmd=` token in one line.
    DuplicateCmd,
    /// The command name is empty or not a valid key (printable ASCII, no `=`).
    BadName,
    /// `cmd` or `mcmd` used as an argument key, which would make the message ambiguous.
    ReservedKey,
    /// `mcmd=` inside a single line; it may only start a multi-line block.
    McmdInLine,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Empty => f.write_str("empty message"),
            WireError::LineTooLong { len } => {
                write!(
                    f,
                    "line of {len} bytes exceeds the {MAX_LINE_LEN}-byte limit"
                )
            }
            WireError::BlockTooLong { len } => write!(
                f,
                "multi-line block of {len} bytes exceeds the limit ({MAX_BLOCK_LEN} bytes, \
                 {MAX_LINE_LEN} per line)"
            ),
            WireError::Truncated => f.write_str("input ended in the middle of a message"),
            WireError::NotUtf8 { offset } => write!(f, "invalid UTF-8 at byte {offset}"),
            WireError::ControlChar { offset } => write!(f, "control character at byte {offset}"),
            WireError::BareToken { offset } => {
                write!(f, "token at byte {offset} is not of the form key=value")
            }
            WireError::EmptyKey { offset } => write!(f, "token at byte {offset} has an empty key"),
            WireError::BadKey { offset } => write!(
                f,
                "key at byte {offset} contains a character outside printable ASCII"
            ),
            WireError::KeyTooLong { len } => {
                write!(f, "key of {len} bytes exceeds the {MAX_KEY_LEN}-byte limit")
            }
            WireError::ValueTooLong { len } => {
                write!(
                    f,
                    "value of {len} bytes exceeds the {MAX_VALUE_LEN}-byte limit"
                )
            }
            WireError::SpaceInValue { offset } => {
                write!(f, "value of the token at byte {offset} contains a space")
            }
            WireError::MissingCmd => f.write_str("no cmd= token"),
            WireError::DuplicateCmd => f.write_str("more than one cmd= token"),
            WireError::BadName => f.write_str("command name is empty or not printable ASCII"),
            WireError::ReservedKey => f.write_str("cmd and mcmd cannot be argument keys"),
            WireError::McmdInLine => f.write_str("mcmd= may only start a multi-line block"),
        }
    }
}

impl std::error::Error for WireError {}

/// One PMI-1 message: a command name and its `key=value` arguments, in order.
///
/// Arguments keep their order and duplicates so that formatting a parsed message reproduces it;
/// [`get`](Command::get) returns the first occurrence, as Hydra's token lookup does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Command {
    name: String,
    multi: bool,
    args: Vec<(String, String)>,
}

impl Command {
    /// A single-line command `cmd=name` with no arguments yet.
    ///
    /// Nothing is validated until [`to_wire`](Command::to_wire), so building never fails.
    pub fn new(name: impl Into<String>) -> Self {
        Command {
            name: name.into(),
            multi: false,
            args: Vec::new(),
        }
    }

    /// A multi-line command (`mcmd=name` ... `endcmd`), the form PMI-1 uses for `spawn`.
    pub fn new_multi(name: impl Into<String>) -> Self {
        Command {
            name: name.into(),
            multi: true,
            args: Vec::new(),
        }
    }

    /// Appends an argument and returns the command, for building replies in one expression.
    #[must_use]
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.push(key, value);
        self
    }

    /// Appends an argument.
    pub fn push(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.args.push((key.into(), value.into()));
    }

    /// The command name (the value of `cmd=` or `mcmd=`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this is the multi-line `mcmd=` form.
    pub fn is_multi(&self) -> bool {
        self.multi
    }

    /// The value of the first argument named `key`, if any.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// All arguments, in wire order.
    pub fn args(&self) -> &[(String, String)] {
        &self.args
    }

    /// Checks that the command can be formatted, and that the formatted message will parse
    /// back to an equal command.
    pub fn validate(&self) -> Result<(), WireError> {
        self.to_wire().map(|_| ())
    }

    /// Formats the command as it goes on the wire, newline(s) included.
    ///
    /// Fails, rather than producing something a peer would misparse, if a name, key or value
    /// breaks the rules in the module docs or the result exceeds the length limits.
    pub fn to_wire(&self) -> Result<String, WireError> {
        check_key_chars(&self.name, 0).map_err(|_| WireError::BadName)?;
        if self.name.len() > MAX_KEY_LEN {
            return Err(WireError::BadName);
        }
        let mut out = String::with_capacity(64);
        out.push_str(if self.multi { "mcmd=" } else { "cmd=" });
        out.push_str(&self.name);
        let sep = if self.multi { '\n' } else { ' ' };
        for (key, value) in &self.args {
            let offset = out.len() + 1;
            check_key(key, offset)?;
            if key == "cmd" || key == "mcmd" {
                return Err(WireError::ReservedKey);
            }
            check_value(value, offset, self.multi)?;
            out.push(sep);
            out.push_str(key);
            out.push('=');
            out.push_str(value);
        }
        if self.multi {
            out.push('\n');
            out.push_str(END_BLOCK);
            out.push('\n');
            if out.len() > MAX_BLOCK_LEN {
                return Err(WireError::BlockTooLong { len: out.len() });
            }
        } else {
            if out.len() > MAX_LINE_LEN {
                return Err(WireError::LineTooLong { len: out.len() });
            }
            out.push('\n');
        }
        Ok(out)
    }

    /// Parses one complete message: a line (the trailing `\n` is optional) or a multi-line
    /// block starting with `mcmd=` (the trailing `endcmd` line is optional).
    ///
    /// For every command `c` with `c.validate().is_ok()`,
    /// `Command::parse(c.to_wire()?.as_bytes()) == Ok(c)`.
    pub fn parse(msg: &[u8]) -> Result<Command, WireError> {
        if msg.starts_with(b"mcmd=") {
            let body = strip_suffix(msg, b"\n");
            let body = strip_suffix(body, b"\nendcmd");
            parse_block(body)
        } else {
            parse_line(msg)
        }
    }
}

fn strip_suffix<'a>(s: &'a [u8], suffix: &[u8]) -> &'a [u8] {
    s.strip_suffix(suffix).unwrap_or(s)
}

/// Keys (and command names) are printable ASCII without `=`; anything else could be misread by
/// a C peer that compares keys with `strcmp`.
fn check_key_chars(key: &str, offset: usize) -> Result<(), WireError> {
    if key.is_empty() {
        return Err(WireError::EmptyKey { offset });
    }
    if key.bytes().all(|b| b.is_ascii_graphic() && b != b'=') {
        Ok(())
    } else {
        Err(WireError::BadKey { offset })
    }
}

fn check_key(key: &str, offset: usize) -> Result<(), WireError> {
    check_key_chars(key, offset)?;
    if key.len() > MAX_KEY_LEN {
        return Err(WireError::KeyTooLong { len: key.len() });
    }
    Ok(())
}

/// Values are any UTF-8 without control characters; in the single-line form also without
/// spaces (the separator).
fn check_value(value: &str, offset: usize, multi: bool) -> Result<(), WireError> {
    if value.len() > MAX_VALUE_LEN {
        return Err(WireError::ValueTooLong { len: value.len() });
    }
    for (i, c) in value.char_indices() {
        if c.is_control() {
            return Err(WireError::ControlChar { offset: offset + i });
        }
        if c == ' ' && !multi {
            return Err(WireError::SpaceInValue { offset });
        }
    }
    Ok(())
}

/// Drops one trailing `\n`, then one `\r` (tolerating CRLF from hand-typed test sessions).
fn trim_eol(mut s: &[u8]) -> &[u8] {
    if let Some(rest) = s.strip_suffix(b"\n") {
        s = rest;
    }
    if let Some(rest) = s.strip_suffix(b"\r") {
        s = rest;
    }
    s
}

/// Rejects non-UTF-8 and control characters up front, so later steps can slice freely.
fn checked_str(bytes: &[u8]) -> Result<&str, WireError> {
    let s = std::str::from_utf8(bytes).map_err(|e| WireError::NotUtf8 {
        offset: e.valid_up_to(),
    })?;
    if let Some((offset, _)) = s.char_indices().find(|(_, c)| c.is_control()) {
        return Err(WireError::ControlChar { offset });
    }
    Ok(s)
}

/// Splits `key=value` at the first `=` and checks both halves.
fn split_token(token: &str, offset: usize, multi: bool) -> Result<(&str, &str), WireError> {
    let Some(eq) = token.find('=') else {
        return Err(WireError::BareToken { offset });
    };
    let (key, value) = (&token[..eq], &token[eq + 1..]);
    check_key(key, offset)?;
    check_value(value, offset, multi)?;
    Ok((key, value))
}

fn parse_line(line: &[u8]) -> Result<Command, WireError> {
    let line = trim_eol(line);
    if line.len() > MAX_LINE_LEN {
        return Err(WireError::LineTooLong { len: line.len() });
    }
    let s = checked_str(line)?;
    let mut name: Option<&str> = None;
    let mut args = Vec::new();
    let mut offset = 0;
    for token in s.split(' ') {
        let here = offset;
        offset += token.len() + 1;
        if token.is_empty() {
            continue;
        }
        let (key, value) = split_token(token, here, false)?;
        match key {
            "cmd" => {
                if name.is_some() {
                    return Err(WireError::DuplicateCmd);
                }
                check_key(value, here).map_err(|_| WireError::BadName)?;
                name = Some(value);
            }
            "mcmd" => return Err(WireError::McmdInLine),
            _ => args.push((key.to_owned(), value.to_owned())),
        }
    }
    match name {
        Some(name) => Ok(Command {
            name: name.to_owned(),
            multi: false,
            args,
        }),
        None if args.is_empty() => Err(WireError::Empty),
        None => Err(WireError::MissingCmd),
    }
}

/// Parses the lines of a multi-line block, without its `endcmd` line.
fn parse_block(block: &[u8]) -> Result<Command, WireError> {
    if block.len() > MAX_BLOCK_LEN {
        return Err(WireError::BlockTooLong { len: block.len() });
    }
    let block = std::str::from_utf8(block).map_err(|e| WireError::NotUtf8 {
        offset: e.valid_up_to(),
    })?;
    let mut name: Option<&str> = None;
    let mut args = Vec::new();
    let mut offset = 0;
    for raw in block.split('\n') {
        let here = offset;
        offset += raw.len() + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.is_empty() {
            continue;
        }
        if line.len() > MAX_LINE_LEN {
            return Err(WireError::BlockTooLong { len: block.len() });
        }
        if let Some((i, _)) = line.char_indices().find(|(_, c)| c.is_control()) {
            return Err(WireError::ControlChar { offset: here + i });
        }
        let (key, value) = split_token(line, here, true)?;
        match (key, name) {
            ("mcmd", None) => {
                check_key(value, here).map_err(|_| WireError::BadName)?;
                name = Some(value);
            }
            ("mcmd", Some(_)) => return Err(WireError::DuplicateCmd),
            (_, None) => return Err(WireError::MissingCmd),
            ("cmd", Some(_)) => return Err(WireError::ReservedKey),
            (_, Some(_)) => args.push((key.to_owned(), value.to_owned())),
        }
    }
    match name {
        Some(name) => Ok(Command {
            name: name.to_owned(),
            multi: true,
            args,
        }),
        None => Err(WireError::Empty),
    }
}

/// What a [`Decoder`] is in the middle of.
#[derive(Debug)]
enum BlockState {
    /// Between messages, or inside a single line.
    Idle,
    /// Inside an `mcmd=` block; the bytes collected so far, lines joined by `\n`.
    Collecting(Vec<u8>),
    /// Inside a block that was already rejected; skipping to its `endcmd`.
    Skipping,
}

/// Splits a byte stream into PMI-1 messages: lines, and `mcmd=` ... `endcmd` blocks.
///
/// Feed it whatever `read` returned with [`push`](Decoder::push), then drain messages with
/// [`next_message`](Decoder::next_message) until it returns `None`. A malformed or overlong
/// message yields one `Err` and the decoder resynchronises at the next line (or, inside a block,
/// at the next `endcmd`), so one bad line costs one error reply, not the connection. As long as
/// the caller drains between pushes, the decoder holds at most [`MAX_LINE_LEN`] bytes of an
/// unfinished line plus [`MAX_BLOCK_LEN`] of a block.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    block: BlockState,
    /// Discarding the rest of a line already reported as too long.
    skip_line: bool,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// An empty decoder, at a message boundary.
    pub fn new() -> Self {
        Decoder {
            buf: Vec::new(),
            block: BlockState::Idle,
            skip_line: false,
        }
    }

    /// Appends bytes read from the connection.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Whether the decoder is exactly at a message boundary with nothing buffered; at end of
    /// stream, anything else means the peer stopped mid-message.
    pub fn is_idle(&self) -> bool {
        self.buf.is_empty() && matches!(self.block, BlockState::Idle) && !self.skip_line
    }

    /// The next complete message, an error for the next malformed one, or `None` when more
    /// bytes are needed. Blank lines between messages are skipped.
    pub fn next_message(&mut self) -> Option<Result<Command, WireError>> {
        loop {
            let Some(nl) = self.buf.iter().position(|&b| b == b'\n') else {
                return self.overflow_check();
            };
            let line: Vec<u8> = self.buf.drain(..=nl).collect();
            let line = trim_eol(&line);
            if self.skip_line {
                self.skip_line = false;
                continue;
            }
            match &mut self.block {
                BlockState::Skipping => {
                    if line == END_BLOCK.as_bytes() {
                        self.block = BlockState::Idle;
                    }
                }
                BlockState::Collecting(block) => {
                    if line == END_BLOCK.as_bytes() {
                        let block = std::mem::take(block);
                        self.block = BlockState::Idle;
                        return Some(parse_block(&block));
                    }
                    let len = block.len() + line.len() + 1;
                    if line.len() > MAX_LINE_LEN || len + END_BLOCK.len() + 1 > MAX_BLOCK_LEN {
                        self.block = BlockState::Skipping;
                        return Some(Err(WireError::BlockTooLong { len }));
                    }
                    block.extend_from_slice(line);
                    block.push(b'\n');
                }
                BlockState::Idle => {
                    if line.iter().all(|&b| b == b' ') {
                        continue;
                    }
                    if line.starts_with(b"mcmd=") && line.len() <= MAX_LINE_LEN {
                        let mut block = line.to_vec();
                        block.push(b'\n');
                        self.block = BlockState::Collecting(block);
                        continue;
                    }
                    return Some(parse_line(line));
                }
            }
        }
    }

    /// With no newline buffered: reports (once) a line that has already grown past the limit,
    /// and drops its bytes so a peer cannot make us buffer without bound.
    fn overflow_check(&mut self) -> Option<Result<Command, WireError>> {
        if self.skip_line {
            self.buf.clear();
            return None;
        }
        if self.buf.len() <= MAX_LINE_LEN {
            return None;
        }
        let len = self.buf.len();
        self.buf.clear();
        self.skip_line = true;
        match self.block {
            BlockState::Idle => Some(Err(WireError::LineTooLong { len })),
            BlockState::Collecting(_) => {
                self.block = BlockState::Skipping;
                Some(Err(WireError::BlockTooLong { len }))
            }
            BlockState::Skipping => None,
        }
    }

    /// Call at end of stream: an error if the peer stopped in the middle of a message.
    pub fn finish(&self) -> Result<(), WireError> {
        if self.is_idle() {
            Ok(())
        } else {
            Err(WireError::Truncated)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Command, WireError> {
        Command::parse(s.as_bytes())
    }

    #[test]
    fn parses_a_simple_line() {
        let c = parse("cmd=put kvsname=kvs_1 key=k value=v\n").unwrap();
        assert_eq!(c.name(), "put");
        assert_eq!(c.get("kvsname"), Some("kvs_1"));
        assert_eq!(c.get("key"), Some("k"));
        assert_eq!(c.get("value"), Some("v"));
        assert_eq!(c.get("nope"), None);
        assert!(!c.is_multi());
    }

    #[test]
    fn accepts_any_order_unknown_keys_and_extra_spaces() {
        let c = parse("  rc=0 future_key=x   cmd=get_result value=abc ").unwrap();
        assert_eq!(c.name(), "get_result");
        assert_eq!(c.get("rc"), Some("0"));
        assert_eq!(c.get("future_key"), Some("x"));
        assert_eq!(c.get("value"), Some("abc"));
    }

    #[test]
    fn values_split_at_the_first_equals() {
        let c = parse("cmd=put key=k value=a=b==c").unwrap();
        assert_eq!(c.get("value"), Some("a=b==c"));
        let c = parse("cmd=put key=k value=").unwrap();
        assert_eq!(c.get("value"), Some(""));
    }

    #[test]
    fn tolerates_crlf() {
        assert_eq!(parse("cmd=barrier_in\r\n").unwrap().name(), "barrier_in");
    }

    #[test]
    fn rejects_malformed_lines_with_a_reason() {
        assert_eq!(parse(""), Err(WireError::Empty));
        assert_eq!(parse("   \n"), Err(WireError::Empty));
        assert_eq!(parse("key=v"), Err(WireError::MissingCmd));
        assert_eq!(parse("cmd=a cmd=b"), Err(WireError::DuplicateCmd));
        assert_eq!(parse("cmd=a junk"), Err(WireError::BareToken { offset: 6 }));
        assert_eq!(parse("cmd=a =v"), Err(WireError::EmptyKey { offset: 6 }));
        assert_eq!(parse("cmd="), Err(WireError::BadName));
        assert_eq!(parse("cmd=a=b"), Err(WireError::BadName));
        assert_eq!(
            parse("cmd=a k=\u{7}"),
            Err(WireError::ControlChar { offset: 8 })
        );
        assert_eq!(
            parse("cmd=a k=v\0"),
            Err(WireError::ControlChar { offset: 9 })
        );
        assert_eq!(
            parse("cmd=a\tk=v"),
            Err(WireError::ControlChar { offset: 5 })
        );
        assert_eq!(
            parse("cmd=a k\u{e9}=v"),
            Err(WireError::BadKey { offset: 6 })
        );
        assert_eq!(parse("cmd=a mcmd=spawn"), Err(WireError::McmdInLine));
        assert_eq!(
            Command::parse(b"cmd=a k=\xff"),
            Err(WireError::NotUtf8 { offset: 8 })
        );
    }

    #[test]
    fn enforces_length_limits() {
        let key = "k".repeat(MAX_KEY_LEN);
        assert!(parse(&format!("cmd=a {key}=v")).is_ok());
        assert_eq!(
            parse(&format!("cmd=a {key}x=v")),
            Err(WireError::KeyTooLong {
                len: MAX_KEY_LEN + 1
            })
        );
        let value = "v".repeat(MAX_VALUE_LEN);
        assert!(parse(&format!("cmd=a k={value}")).is_ok());
        assert_eq!(
            parse(&format!("cmd=a k={value}v")),
            Err(WireError::ValueTooLong {
                len: MAX_VALUE_LEN + 1
            })
        );
        let line = format!("cmd=a {}", "k=v ".repeat(MAX_LINE_LEN / 4));
        assert!(matches!(parse(&line), Err(WireError::LineTooLong { .. })));
    }

    #[test]
    fn the_longest_legal_put_fits_a_line() {
        let put = Command::new("put")
            .with("kvsname", "n".repeat(MAX_KVSNAME_LEN))
            .with("key", "k".repeat(MAX_KEY_LEN))
            .with("value", "v".repeat(MAX_VALUE_LEN));
        let wire = put.to_wire().unwrap();
        assert_eq!(Command::parse(wire.as_bytes()), Ok(put));
    }

    #[test]
    fn formats_in_insertion_order() {
        let c = Command::new("get_result")
            .with("rc", "0")
            .with("msg", "success")
            .with("value", "x=y");
        assert_eq!(
            c.to_wire().unwrap(),
            "cmd=get_result rc=0 msg=success value=x=y\n"
        );
    }

    #[test]
    fn formatting_refuses_what_would_misparse() {
        let bad = |c: Command| c.to_wire().unwrap_err();
        assert_eq!(
            bad(Command::new("put").with("value", "a b")),
            WireError::SpaceInValue { offset: 8 }
        );
        assert_eq!(
            bad(Command::new("put").with("cmd", "x")),
            WireError::ReservedKey
        );
        assert_eq!(bad(Command::new("a b")), WireError::BadName);
        assert_eq!(bad(Command::new("")), WireError::BadName);
        assert!(matches!(
            bad(Command::new("put").with("k", "a\nb")),
            WireError::ControlChar { .. }
        ));
        assert!(matches!(
            bad(Command::new("put").with("k=", "v")),
            WireError::BadKey { .. }
        ));
    }

    #[test]
    fn multi_line_blocks_round_trip_and_allow_spaces() {
        let spawn = Command::new_multi("spawn")
            .with("nprocs", "2")
            .with("execname", "/bin/echo")
            .with("arg1", "hello world")
            .with("endcmdx", "not the end");
        let wire = spawn.to_wire().unwrap();
        assert_eq!(
            wire,
            "mcmd=spawn\nnprocs=2\nexecname=/bin/echo\narg1=hello world\nendcmdx=not the end\nendcmd\n"
        );
        assert_eq!(Command::parse(wire.as_bytes()), Ok(spawn));
    }

    #[test]
    fn decoder_frames_lines_and_blocks_across_reads() {
        let mut d = Decoder::new();
        d.push(b"cmd=initack\ncmd=set si");
        assert_eq!(d.next_message().unwrap().unwrap().name(), "initack");
        assert!(d.next_message().is_none());
        assert!(!d.is_idle());
        d.push(b"ze=4\n\nmcmd=spawn\nnprocs=1\n");
        let set = d.next_message().unwrap().unwrap();
        assert_eq!(set.get("size"), Some("4"));
        assert!(d.next_message().is_none());
        d.push(b"execname=a b\nendcmd\ncmd=finalize\n");
        let spawn = d.next_message().unwrap().unwrap();
        assert!(spawn.is_multi());
        assert_eq!(spawn.get("execname"), Some("a b"));
        assert_eq!(d.next_message().unwrap().unwrap().name(), "finalize");
        assert!(d.next_message().is_none());
        assert!(d.is_idle());
        assert_eq!(d.finish(), Ok(()));
    }

    #[test]
    fn decoder_reports_an_endless_line_once_and_resyncs() {
        let mut d = Decoder::new();
        d.push(&vec![b'x'; MAX_LINE_LEN + 1]);
        assert!(matches!(
            d.next_message(),
            Some(Err(WireError::LineTooLong { .. }))
        ));
        d.push(&[b'y'; 5000]);
        assert!(d.next_message().is_none());
        assert!(d.buf.is_empty(), "an overlong line must not be buffered");
        d.push(b"yyy\ncmd=barrier_in\n");
        assert_eq!(d.next_message().unwrap().unwrap().name(), "barrier_in");
    }

    #[test]
    fn decoder_rejects_an_endless_block_then_resyncs_at_endcmd() {
        let mut d = Decoder::new();
        d.push(b"mcmd=spawn\n");
        let line = format!("arg={}\n", "a".repeat(1000));
        let mut errors = 0;
        for _ in 0..(MAX_BLOCK_LEN / line.len() + 2) {
            d.push(line.as_bytes());
            while let Some(m) = d.next_message() {
                assert!(matches!(m, Err(WireError::BlockTooLong { .. })));
                errors += 1;
            }
        }
        assert_eq!(errors, 1);
        d.push(b"endcmd\ncmd=get_maxes\n");
        assert_eq!(d.next_message().unwrap().unwrap().name(), "get_maxes");
    }

    #[test]
    fn decoder_reports_a_bad_line_and_continues() {
        let mut d = Decoder::new();
        d.push(b"garbage\ncmd=get_maxes\n");
        assert_eq!(
            d.next_message(),
            Some(Err(WireError::BareToken { offset: 0 }))
        );
        assert_eq!(d.next_message().unwrap().unwrap().name(), "get_maxes");
    }

    proptest::proptest! {
        /// Whatever a peer sends, in whatever pieces, the decoder neither panics nor holds
        /// more than one line limit of unterminated input plus one block limit.
        #[test]
        fn decoder_memory_stays_bounded(
            chunks in proptest::collection::vec(
                proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3000), 0..8),
            newline_every in 2u8..255,
        ) {
            // Turn some bytes into newlines so that lines of every length occur.
            let chunks: Vec<Vec<u8>> = chunks
                .into_iter()
                .map(|c| c.into_iter().map(|b| if b % newline_every == 0 { b'\n' } else { b }).collect())
                .collect();
            let mut d = Decoder::new();
            for chunk in &chunks {
                d.push(chunk);
                while d.next_message().is_some() {}
                proptest::prop_assert!(d.buf.len() <= MAX_LINE_LEN);
                if let BlockState::Collecting(b) = &d.block {
                    proptest::prop_assert!(b.len() <= MAX_BLOCK_LEN);
                }
            }
        }
    }

    #[test]
    fn finish_detects_truncation() {
        let mut d = Decoder::new();
        d.push(b"cmd=barr");
        assert!(d.next_message().is_none());
        assert_eq!(d.finish(), Err(WireError::Truncated));
    }
}
