//! A turn's frames kept for `resume_chat`, bounded in bytes: consecutive text chunks are
//! coalesced into one run (8 bytes of bookkeeping per chunk instead of a frame), and when the
//! bound is passed the oldest frames go. A client resuming from before what is kept gets the
//! stored snapshot first.

use std::collections::VecDeque;
use std::sync::Arc;

use weft_protocol::{ServerEvent, ServerFrame};

use crate::frame::SharedFrame;

/// Consecutive chunks at one place of the turn, coalesced.
#[derive(Debug)]
struct TextRun {
    parent_id: Option<String>,
    depth: u32,
    content: String,
    /// The seq the run's pieces count from.
    base: u64,
    /// Each chunk's seq (above `base`) and where its text ends in `content`.
    pieces: VecDeque<(u32, u32)>,
    /// Bytes dropped from the front of `content` (piece offsets count from the original start).
    trimmed: usize,
}

/// Bookkeeping per coalesced chunk.
const PIECE_BYTES: usize = std::mem::size_of::<(u32, u32)>();

impl TextRun {
    /// A piece's seq and where its text ends.
    fn piece(&self, (seq, end): (u32, u32)) -> (u64, usize) {
        (self.base + u64::from(seq), end as usize)
    }
}

/// One kept frame, or a run of chunks. Two words: a W1 turn keeps ~80 entries, and the
/// queue's slots (rounded up to a power of two) are held for the whole turn, so the run is
/// boxed rather than inlined in every slot (~110 bytes a slot).
#[derive(Debug)]
enum Entry {
    Frame(Arc<SharedFrame>),
    Text(Box<TextRun>),
}

impl Entry {
    fn bytes(&self) -> usize {
        match self {
            Entry::Frame(f) => f.len(),
            Entry::Text(run) => run.content.len() + run.pieces.len() * PIECE_BYTES,
        }
    }

    fn last_seq(&self) -> u64 {
        match self {
            Entry::Frame(f) => f.seq.unwrap_or(0),
            Entry::Text(run) => run.pieces.back().map_or(0, |&p| run.piece(p).0),
        }
    }
}

#[derive(Debug, Default)]
pub struct Replay {
    entries: VecDeque<Entry>,
    bytes: usize,
    limit: usize,
    /// Every frame with a seq up to this one was dropped to stay within the bound.
    dropped_through: u64,
}

/// What a resuming client gets from the buffer.
pub struct Missed {
    pub frames: Vec<Arc<SharedFrame>>,
    /// The client missed frames that are no longer kept: send the stored snapshot first.
    pub needs_snapshot: bool,
}

impl Replay {
    pub fn new(limit: usize) -> Self {
        Replay {
            limit,
            ..Replay::default()
        }
    }

    pub fn clear(&mut self) {
        *self = Replay::new(self.limit);
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.dropped_through == 0
    }

    /// Keep a published frame (`event` is what it encodes).
    pub fn push(&mut self, event: &ServerEvent, seq: u64, frame: &Arc<SharedFrame>) {
        if let ServerEvent::Chunk {
            content,
            done: false,
            parent_id,
            depth,
        } = event
        {
            let same_place = matches!(self.entries.back(), Some(Entry::Text(run))
                if run.depth == *depth && run.parent_id == *parent_id);
            if !same_place {
                self.entries.push_back(Entry::Text(Box::new(TextRun {
                    parent_id: parent_id.clone(),
                    depth: *depth,
                    content: String::new(),
                    base: seq,
                    pieces: VecDeque::new(),
                    trimmed: 0,
                })));
            }
            if let Some(Entry::Text(run)) = self.entries.back_mut() {
                run.content.push_str(content);
                // A turn's seqs and text stay far below 2^32 from a run's start (its frames
                // number within 2^26 of its floor; its text is capped).
                let seq = u32::try_from(seq.saturating_sub(run.base)).unwrap_or(u32::MAX);
                let end = u32::try_from(run.trimmed + run.content.len()).unwrap_or(u32::MAX);
                run.pieces.push_back((seq, end));
                self.bytes += content.len() + PIECE_BYTES;
            }
        } else {
            self.bytes += frame.len();
            self.entries.push_back(Entry::Frame(frame.clone()));
        }
        self.trim();
    }

    /// Drop the oldest frames until the buffer fits its bound again.
    fn trim(&mut self) {
        while self.bytes > self.limit {
            let only_one = self.entries.len() == 1;
            match self.entries.front_mut() {
                None => return,
                Some(Entry::Text(run)) if only_one && run.pieces.len() > 1 => {
                    // One long stream: drop its older half in one go (amortised).
                    let keep_from = run.pieces.len() / 2;
                    let (seq, end) = run.piece(run.pieces[keep_from - 1]);
                    run.pieces.drain(..keep_from);
                    let cut = end - run.trimmed;
                    run.content.drain(..cut);
                    run.trimmed = end;
                    self.bytes -= cut + keep_from * PIECE_BYTES;
                    self.dropped_through = self.dropped_through.max(seq);
                }
                Some(_) => {
                    if let Some(entry) = self.entries.pop_front() {
                        self.bytes -= entry.bytes();
                        self.dropped_through = self.dropped_through.max(entry.last_seq());
                    }
                }
            }
        }
    }

    /// The frames after `last_seq`, coalesced text included, for `thread_id`.
    pub fn after(&self, last_seq: u64, thread_id: &Arc<str>) -> Missed {
        let mut frames = Vec::new();
        for entry in &self.entries {
            match entry {
                Entry::Frame(f) if f.seq.unwrap_or(0) > last_seq => frames.push(f.clone()),
                Entry::Frame(_) => {}
                Entry::Text(run) => {
                    let Some((seq, _)) = run
                        .pieces
                        .back()
                        .map(|&p| run.piece(p))
                        .filter(|p| p.0 > last_seq)
                    else {
                        continue;
                    };
                    // Start after the last piece the client already has.
                    let from = run
                        .pieces
                        .iter()
                        .map(|&p| run.piece(p))
                        .take_while(|p| p.0 <= last_seq)
                        .last()
                        .map_or(run.trimmed, |p| p.1);
                    let text = &run.content[from.saturating_sub(run.trimmed)..];
                    frames.push(SharedFrame::encode(&ServerFrame {
                        thread_id: Some(thread_id.clone()),
                        seq: Some(seq),
                        event: ServerEvent::Chunk {
                            content: text.to_owned(),
                            done: false,
                            parent_id: run.parent_id.clone(),
                            depth: run.depth,
                        },
                    }));
                }
            }
        }
        Missed {
            frames,
            needs_snapshot: last_seq < self.dropped_through,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(text: &str, depth: u32) -> ServerEvent {
        ServerEvent::Chunk {
            content: text.into(),
            done: false,
            parent_id: (depth > 0).then(|| "p".to_owned()),
            depth,
        }
    }

    fn push(replay: &mut Replay, seq: u64, event: ServerEvent) {
        let frame = SharedFrame::encode(&ServerFrame {
            thread_id: Some(Arc::from("t")),
            seq: Some(seq),
            event: event.clone(),
        });
        replay.push(&event, seq, &frame);
    }

    fn texts(missed: &Missed) -> Vec<String> {
        missed
            .frames
            .iter()
            .map(|f| {
                let v: serde_json::Value = serde_json::from_str(f.json()).unwrap();
                format!("{}:{}", v["seq"], v["content"].as_str().unwrap_or("*"))
            })
            .collect()
    }

    #[test]
    fn an_entry_is_two_words() {
        assert_eq!(
            std::mem::size_of::<Entry>(),
            2 * std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn chunks_coalesce_and_resume_from_inside_a_run() {
        let mut r = Replay::new(1 << 20);
        push(&mut r, 1, ServerEvent::Pong);
        push(&mut r, 2, chunk("a", 0));
        push(&mut r, 3, chunk("b", 0));
        push(&mut r, 4, chunk("x", 1));
        push(&mut r, 5, chunk("c", 0));
        let t: Arc<str> = Arc::from("t");
        assert_eq!(texts(&r.after(0, &t)), vec!["1:*", "3:ab", "4:x", "5:c"]);
        assert_eq!(texts(&r.after(2, &t)), vec!["3:b", "4:x", "5:c"]);
        assert_eq!(texts(&r.after(4, &t)), vec!["5:c"]);
        assert!(!r.after(0, &t).needs_snapshot);
    }

    #[test]
    fn a_long_stream_stays_within_the_bound_and_asks_for_a_snapshot() {
        let mut r = Replay::new(10_000);
        for seq in 1..=5_000u64 {
            push(&mut r, seq, chunk("0123456789", 0));
        }
        assert!(r.bytes() <= 10_000, "{} bytes kept", r.bytes());
        let t: Arc<str> = Arc::from("t");
        let missed = r.after(0, &t);
        assert!(missed.needs_snapshot);
        let kept = r.after(4_990, &t);
        assert!(!kept.needs_snapshot);
        assert_eq!(
            texts(&kept),
            vec![format!("5000:{}", "0123456789".repeat(10))]
        );
    }
}
