//! Little-endian byte reading shared by every binary decoder; running out of input is an error, never a panic.

use crate::error::DecodeError;
use crate::Hash;

#[derive(Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let b = self.take(N)?;
        <[u8; N]>::try_from(b).map_err(|_| DecodeError::Truncated)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(crate) fn hash(&mut self) -> Result<Hash, DecodeError> {
        Ok(Hash(self.array()?))
    }

    /// Reads the `format` and `type` bytes of SPEC.md §4.
    pub(crate) fn header(&mut self, expected_type: u8) -> Result<(), DecodeError> {
        let format = self.u8()?;
        if format != crate::FORMAT_VERSION {
            return Err(DecodeError::UnsupportedFormat(u64::from(format)));
        }
        let found = self.u8()?;
        if found != expected_type {
            return Err(DecodeError::WrongType {
                expected: expected_type,
                found,
            });
        }
        Ok(())
    }

    /// Fails with `trailing_data` unless the whole input was consumed.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingData(self.buf.len()))
        }
    }
}

/// Object type bytes (SPEC.md §4).
pub(crate) mod object {
    pub(crate) const STATE_PROOF: u8 = 0x01;
    pub(crate) const DIGEST: u8 = 0x02;
    pub(crate) const HISTORY_INCLUSION: u8 = 0x03;
    pub(crate) const HISTORY_CONSISTENCY: u8 = 0x04;
    pub(crate) const SNAPSHOT_MANIFEST: u8 = 0x05;
    pub(crate) const SNAPSHOT_CHUNK: u8 = 0x06;
}
