//! Reading a fuzz input as a sequence of choices: the fuzzer's bytes steer which calls a body
//! makes and with what, and running out of bytes reads as zeros, so every input is valid.

/// A cursor over the fuzzer's bytes.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// The whole input.
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    /// Whether every byte has been taken.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// The next four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// The next eight bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// Up to `n` bytes (fewer at the end).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (take, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        take
    }

    /// A byte string whose length is the next byte.
    pub fn short_bytes(&mut self) -> &'a [u8] {
        let n = self.u8() as usize;
        self.bytes(n)
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    /// Piece sizes for feeding a stream in arbitrary pieces: each byte left is a size (0 read
    /// as 1); at least one piece.
    pub fn pieces(&mut self) -> Vec<usize> {
        let mut v: Vec<usize> = self.rest().iter().map(|&b| usize::from(b).max(1)).collect();
        if v.is_empty() {
            v.push(usize::MAX);
        }
        v
    }
}

/// Splits `data` into `pieces` sizes, cycling through them: the chunks a stream might arrive in.
pub fn chunks<'a>(data: &'a [u8], pieces: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < data.len() {
        let n = pieces[i % pieces.len()].min(data.len() - at);
        out.push(&data[at..at + n]);
        at += n;
        i += 1;
    }
    out
}
