//! The PMI-2 wire format: framing, parsing and formatting of `cmd=NAME;key=value;...` messages.
//!
//! PMI-2 (MPICH's `src/pmi/pmi2`, Slurm's `mpi/pmi2` plugin, Hydra with `-pmi-version 2`) frames
//! each message with its length: six ASCII characters holding the decimal length of what
//! follows, left-justified and padded with spaces (MPICH formats it `%-6d`; Slurm reads it with
//! `strtol`, so leading spaces are accepted too), then the body: `key=value;` pairs, the first
//! of which is `cmd=NAME`. A `;` inside a value is written twice (`;;`). Keys are looked up by
//! name, so order carries no meaning past the first pair. Only the connection's first exchange
//! is not PMI-2: the client announces the version with a PMI-1 line
//! (`cmd=init pmi_version=2 pmi_subversion=0`, answered `cmd=response_to_init ... rc=0`).
//!
//! Messages are parsed into the same [`Command`] as PMI-1 lines, so the client handles replies
//! of both protocols alike. Like [`wire`](crate::wire), this is sans-IO, never panics, and
//! bounds what a peer can make it buffer.

use crate::wire::{Command, WireError, MAX_KEY_LEN};

/// Characters of the length prefix.
pub const LENGTH_DIGITS: usize = 6;

/// Longest value (MPICH's and Slurm's `PMI2_MAX_VALLEN`).
pub const MAX_VALUE_LEN: usize = 1024;

/// Longest message body this side sends or accepts: a value of the maximum length with every
/// character escaped, its key, and room for the other pairs of the longest reply.
pub const MAX_BODY_LEN: usize = 4 * MAX_VALUE_LEN;

/// Formats `cmd` as one framed PMI-2 message.
pub fn encode(cmd: &Command) -> Result<Vec<u8>, WireError> {
    let mut body = String::new();
    push_pair(&mut body, "cmd", cmd.name())?;
    for (k, v) in cmd.args() {
        if k == "cmd" {
            return Err(WireError::ReservedKey);
        }
        push_pair(&mut body, k, v)?;
    }
    if body.len() > MAX_BODY_LEN {
        return Err(WireError::LineTooLong { len: body.len() });
    }
    let mut out = format!("{:<width$}", body.len(), width = LENGTH_DIGITS).into_bytes();
    out.extend_from_slice(body.as_bytes());
    Ok(out)
}

fn push_pair(body: &mut String, key: &str, value: &str) -> Result<(), WireError> {
    check_key(key, body.len())?;
    if value.len() > MAX_VALUE_LEN {
        return Err(WireError::ValueTooLong { len: value.len() });
    }
    if let Some(i) = value.bytes().position(|b| b.is_ascii_control()) {
        return Err(WireError::ControlChar {
            offset: body.len() + key.len() + 1 + i,
        });
    }
    body.push_str(key);
    body.push('=');
    body.push_str(&value.replace(';', ";;"));
    body.push(';');
    Ok(())
}

fn check_key(key: &str, offset: usize) -> Result<(), WireError> {
    if key.is_empty() {
        return Err(WireError::EmptyKey { offset });
    }
    if key.len() > MAX_KEY_LEN {
        return Err(WireError::KeyTooLong { len: key.len() });
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'=' && b != b';')
    {
        return Err(WireError::BadKey { offset });
    }
    Ok(())
}

/// Parses one message body (without its length prefix).
pub fn parse_body(body: &[u8]) -> Result<Command, WireError> {
    let text = std::str::from_utf8(body).map_err(|e| WireError::NotUtf8 {
        offset: e.valid_up_to(),
    })?;
    if text.trim().is_empty() {
        return Err(WireError::Empty);
    }
    let bytes = text.as_bytes();
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let start = at;
        let eq = text[at..]
            .find('=')
            .map(|i| at + i)
            .ok_or(WireError::BareToken { offset: start })?;
        let key = &text[start..eq];
        if key.contains(';') {
            return Err(WireError::BareToken { offset: start });
        }
        check_key(key, start)?;
        // The value runs to the first `;` that is not doubled.
        let mut value = String::new();
        let mut i = eq + 1;
        loop {
            match bytes.get(i) {
                None => return Err(WireError::Truncated),
                Some(b';') if bytes.get(i + 1) == Some(&b';') => {
                    value.push(';');
                    i += 2;
                }
                Some(b';') => break,
                Some(b) if b.is_ascii_control() => {
                    return Err(WireError::ControlChar { offset: i })
                }
                Some(_) => {
                    // A whole character (the text is UTF-8, and `;` is ASCII).
                    let ch = text[i..].chars().next().ok_or(WireError::Truncated)?;
                    value.push(ch);
                    i += ch.len_utf8();
                }
            }
        }
        if value.len() > MAX_VALUE_LEN {
            return Err(WireError::ValueTooLong { len: value.len() });
        }
        pairs.push((key.to_owned(), value));
        at = i + 1;
    }
    let mut pairs = pairs.into_iter();
    let (first, name) = pairs.next().ok_or(WireError::Empty)?;
    if first != "cmd" {
        return Err(WireError::MissingCmd);
    }
    if name.is_empty() {
        return Err(WireError::BadName);
    }
    let mut cmd = Command::new(name);
    for (k, v) in pairs {
        if k == "cmd" {
            return Err(WireError::DuplicateCmd);
        }
        cmd.push(k, v);
    }
    Ok(cmd)
}

/// Reassembles framed PMI-2 messages from a byte stream.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Decoder::default()
    }

    /// Appends bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Whether no partial message is buffered.
    pub fn is_idle(&self) -> bool {
        self.buf.is_empty()
    }

    /// The next whole message, if one has arrived. A malformed length prefix is an error that
    /// leaves the stream unusable (nothing tells where the next message starts).
    pub fn next_message(&mut self) -> Option<Result<Command, WireError>> {
        if self.buf.len() < LENGTH_DIGITS {
            return None;
        }
        let prefix = &self.buf[..LENGTH_DIGITS];
        let len = match std::str::from_utf8(prefix)
            .ok()
            .map(str::trim)
            .and_then(|s| s.parse::<usize>().ok())
        {
            Some(len) if len <= MAX_BODY_LEN => len,
            Some(len) => return Some(Err(WireError::LineTooLong { len })),
            None => return Some(Err(WireError::BareToken { offset: 0 })),
        };
        if self.buf.len() < LENGTH_DIGITS + len {
            return None;
        }
        let body: Vec<u8> = self
            .buf
            .drain(..LENGTH_DIGITS + len)
            .skip(LENGTH_DIGITS)
            .collect();
        Some(parse_body(&body))
    }

    /// At end of stream: an error if a partial message is left.
    pub fn finish(&self) -> Result<(), WireError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(WireError::Truncated)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_frame_with_a_left_justified_length_and_escape_semicolons() {
        let cmd = Command::new("kvs-put")
            .with("key", "card-0")
            .with("value", "a;b");
        let wire = encode(&cmd).unwrap();
        assert_eq!(
            String::from_utf8(wire.clone()).unwrap(),
            "34    cmd=kvs-put;key=card-0;value=a;;b;"
        );
        let mut d = Decoder::new();
        d.push(&wire);
        assert_eq!(d.next_message().unwrap().unwrap(), cmd);
        assert!(d.is_idle());
    }

    #[test]
    fn messages_arrive_in_pieces_and_back_to_back() {
        let a = encode(&Command::new("kvs-fence")).unwrap();
        let b = encode(
            &Command::new("kvs-get-response")
                .with("found", "TRUE")
                .with("value", "x y"),
        )
        .unwrap();
        let all: Vec<u8> = a.iter().chain(&b).copied().collect();
        let mut d = Decoder::new();
        let mut got = Vec::new();
        for byte in all {
            d.push(&[byte]);
            while let Some(m) = d.next_message() {
                got.push(m.unwrap());
            }
        }
        assert_eq!(got[0].name(), "kvs-fence");
        assert_eq!(got[1].get("value"), Some("x y"));
        d.finish().unwrap();
    }

    #[test]
    fn a_right_justified_length_reads_too() {
        let mut d = Decoder::new();
        d.push(b"    10cmd=x;a=1;");
        assert_eq!(d.next_message().unwrap().unwrap().get("a"), Some("1"));
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        for body in [
            &b""[..],
            b"cmd=x",        // no terminating ;
            b"key=1;cmd=x;", // cmd not first
            b"cmd=;",        // empty name
            b"cmd=x;noequals;",
            b"cmd=x;=v;",
            b"cmd=x;cmd=y;",
            b"cmd=x;k=\x01;",
            b"cmd=x;k=\xff;",
        ] {
            assert!(parse_body(body).is_err(), "{body:?}");
        }
        let mut d = Decoder::new();
        d.push(b"abcdefcmd=x;");
        assert!(d.next_message().unwrap().is_err());
        let mut d = Decoder::new();
        d.push(b"999999");
        assert!(d.next_message().unwrap().is_err(), "a body past the limit");
        let mut d = Decoder::new();
        d.push(b"20    cmd=x;");
        assert!(d.next_message().is_none());
        assert!(d.finish().is_err());
    }

    #[test]
    fn what_cannot_be_sent_is_refused() {
        let long = "v".repeat(MAX_VALUE_LEN + 1);
        assert!(encode(&Command::new("x").with("k", long)).is_err());
        assert!(encode(&Command::new("x").with("k;", "v")).is_err());
        assert!(encode(&Command::new("x").with("k", "line\nbreak")).is_err());
        assert!(encode(&Command::new("x").with("cmd", "y")).is_err());
    }
}
