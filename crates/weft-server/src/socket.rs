//! An upgraded connection split in two. The read side is tungstenite's, which decodes the
//! client's frames and holds it to the protocol; what tungstenite writes there (a pong, the
//! answer to the client's close) waits in [`Replies`] for the writer. The write side is the
//! writer's own: each batch is laid out in a buffer made to its size and dropped once written,
//! so a socket keeps no write buffer between batches (tungstenite's grew to the largest batch
//! or frame it wrote, ~12 KiB a socket under W1, and kept it).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf, ReadHalf, WriteHalf};
use tokio::sync::Notify;

use crate::upgrade::Io;

/// What tungstenite wrote on the read side, waiting for the writer.
#[derive(Default)]
pub struct Replies {
    bytes: Mutex<Vec<u8>>,
    /// Woken when tungstenite writes.
    pub ready: Notify,
}

/// Most bytes of replies kept for the writer: past it, the client (pinging faster than it
/// reads) is cut off.
const REPLIES_MAX: usize = 64 * 1024;

impl Replies {
    /// Take what waits.
    pub fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.bytes.lock())
    }
}

/// The connection as tungstenite sees it: reads from the socket, writes into [`Replies`].
pub struct ReadSide {
    read: ReadHalf<Io>,
    replies: Arc<Replies>,
}

impl AsyncRead for ReadSide {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.read).poll_read(cx, buf)
    }
}

impl AsyncWrite for ReadSide {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut bytes = self.replies.bytes.lock();
        if bytes.len() + buf.len() > REPLIES_MAX {
            return Poll::Ready(Err(io::Error::other(
                "the client does not read the server's replies",
            )));
        }
        bytes.extend_from_slice(buf);
        // Told at once: tungstenite does not flush the answer to a close.
        self.replies.ready.notify_one();
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The writer's side of the connection.
pub struct WriteSide {
    write: WriteHalf<Io>,
}

impl WriteSide {
    /// Write `bytes` (whole frames) and flush.
    pub async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write.write_all(bytes).await?;
        self.write.flush().await
    }

    /// End the connection's write side.
    pub async fn shutdown(&mut self) {
        let _ = self.write.shutdown().await;
    }
}

/// Split an upgraded connection: tungstenite's read side, the writer's side, and the replies
/// tungstenite leaves for the writer.
pub fn split(io: Io) -> (ReadSide, WriteSide, Arc<Replies>) {
    let (read, write) = tokio::io::split(io);
    let replies = Arc::new(Replies::default());
    (
        ReadSide {
            read,
            replies: replies.clone(),
        },
        WriteSide { write },
        replies,
    )
}

/// The kinds of frame the server writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    Text = 0x1,
    Binary = 0x2,
    Close = 0x8,
    Ping = 0x9,
}

/// The bytes of a whole, unmasked (server's) frame carrying `payload`.
pub fn frame_len(payload: usize) -> usize {
    let extended = match payload {
        0..=125 => 0,
        126..=0xFFFF => 2,
        _ => 8,
    };
    2 + extended + payload
}

/// Append a whole, unmasked frame of `payload` to `out`.
pub fn put_frame(out: &mut Vec<u8>, opcode: Opcode, payload: &[u8]) {
    out.push(0x80 | opcode as u8);
    match u16::try_from(payload.len()) {
        Ok(n) if n <= 125 => out.push(n as u8),
        Ok(n) => {
            out.push(126);
            out.extend_from_slice(&n.to_be_bytes());
        }
        Err(_) => {
            out.push(127);
            out.extend_from_slice(&(payload.len() as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
}

/// A close frame with `code` and as much of `reason` as fits (123 bytes, whole characters).
pub fn close_frame(code: u16, reason: &str) -> Vec<u8> {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let mut payload = code.to_be_bytes().to_vec();
    payload.extend_from_slice(&reason.as_bytes()[..end]);
    let mut out = Vec::with_capacity(frame_len(payload.len()));
    put_frame(&mut out, Opcode::Close, &payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_take_the_header_rfc_6455_gives_them() {
        for (payload, header) in [(0, 2), (125, 2), (126, 4), (65_535, 4), (65_536, 10)] {
            let mut out = Vec::new();
            put_frame(&mut out, Opcode::Text, &vec![b'a'; payload]);
            assert_eq!(out.len(), header + payload, "{payload} bytes");
            assert_eq!(frame_len(payload), out.len());
            assert_eq!(out[0], 0x81);
        }
        let mut out = Vec::new();
        put_frame(&mut out, Opcode::Binary, &[0; 300]);
        assert_eq!(out[..4], [0x82, 126, 1, 44]);
    }

    #[test]
    fn a_close_keeps_its_code_and_cuts_its_reason_at_a_character() {
        let frame = close_frame(1009, &"é".repeat(100));
        assert_eq!(frame[0], 0x88);
        let payload = &frame[2..];
        assert_eq!(usize::from(frame[1]), payload.len());
        assert!(payload.len() <= 125);
        assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), 1009);
        assert!(std::str::from_utf8(&payload[2..]).is_ok());
    }
}
