//! A turn's frames kept for `resume_chat`, bounded in bytes: consecutive text chunks are
//! coalesced into one run (8 bytes of bookkeeping per chunk instead of a frame), other frames
//! are packed in blocks of 16 as each block fills, compressed with lz4 (a tool card's frames
//! repeat the same keys, thread id and arguments: a W1 turn's take ~7× less), and when the
//! bound is passed the oldest frames go. A client resuming from before what is kept gets the
//! stored snapshot first.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
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

/// Bookkeeping per coalesced chunk, and per packed frame.
const PIECE_BYTES: usize = std::mem::size_of::<(u32, u32)>();

impl TextRun {
    /// A piece's seq and where its text ends.
    fn piece(&self, (seq, end): (u32, u32)) -> (u64, usize) {
        (self.base + u64::from(seq), end as usize)
    }
}

/// Frames packed together in a block: their JSON one after another, compressed.
#[derive(Debug)]
struct Packed {
    /// The seq the block's frames count from (its first frame's).
    base: u64,
    /// Each frame's seq (above `base`) and where its JSON ends, in order: one allocation,
    /// 8 bytes a frame.
    frames: Box<[(u32, u32)]>,
    /// The frames' JSON, compressed (lz4, its size prepended).
    json: Box<[u8]>,
}

/// Frames a block packs.
const PACKED_FRAMES: usize = 16;

/// The most room a thread keeps for a block's frames after a big block.
const BLOCK_KEPT: usize = 64 * 1024;

thread_local! {
    /// A block's frames one after another, before they are compressed.
    static BLOCK: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Packed {
    /// `frames` in one block.
    fn new(frames: &[Arc<SharedFrame>]) -> Packed {
        let base = frames.first().and_then(|f| f.seq).unwrap_or(0);
        let mut pieces = Vec::with_capacity(frames.len());
        let json = BLOCK.with_borrow_mut(|json| {
            json.clear();
            for frame in frames {
                json.extend_from_slice(frame.json_slice());
                // One turn's frames (the buffer restarts with each turn) number within 2^26
                // of its floor, and a block is 16 frames, each far below 4 GB.
                let seq = frame.seq.unwrap_or(0).saturating_sub(base);
                pieces.push((
                    u32::try_from(seq).unwrap_or(u32::MAX),
                    u32::try_from(json.len()).unwrap_or(u32::MAX),
                ));
            }
            let packed = weft_store::compress(json, |packed| Box::<[u8]>::from(packed));
            if json.capacity() > BLOCK_KEPT {
                *json = Vec::new();
            }
            packed
        });
        Packed {
            base,
            frames: pieces.into(),
            json,
        }
    }

    fn bytes(&self) -> usize {
        self.json.len() + self.frames.len() * PIECE_BYTES
    }

    fn last_seq(&self) -> u64 {
        self.frames
            .last()
            .map_or(0, |&(seq, _)| self.base + u64::from(seq))
    }

    /// The block's frames with a seq above `after`; `None` when it cannot be read back.
    fn frames_after(&self, after: u64) -> Option<Vec<Arc<SharedFrame>>> {
        let json = Bytes::from(lz4_flex::decompress_size_prepended(&self.json).ok()?);
        let mut frames = Vec::new();
        let mut start = 0;
        for &(seq, end) in self.frames.iter() {
            let (seq, end) = (self.base + u64::from(seq), end as usize);
            if end < start || end > json.len() {
                return None;
            }
            if seq > after {
                frames.push(SharedFrame::from_json(Some(seq), json.slice(start..end)));
            }
            start = end;
        }
        Some(frames)
    }
}

/// One kept frame, a run of chunks, or a block of packed frames. Two words: a W1 turn keeps
/// ~80 entries, and the queue's slots (rounded up to a power of two) are held for the whole
/// turn, so the run and the block are boxed rather than inlined in every slot.
#[derive(Debug)]
enum Entry {
    Frame(Arc<SharedFrame>),
    Text(Box<TextRun>),
    Packed(Box<Packed>),
}

impl Entry {
    fn bytes(&self) -> usize {
        match self {
            Entry::Frame(f) => f.len(),
            Entry::Text(run) => run.content.len() + run.pieces.len() * PIECE_BYTES,
            Entry::Packed(block) => block.bytes(),
        }
    }

    fn last_seq(&self) -> u64 {
        match self {
            Entry::Frame(f) => f.seq.unwrap_or(0),
            Entry::Text(run) => run.pieces.back().map_or(0, |&p| run.piece(p).0),
            Entry::Packed(block) => block.last_seq(),
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
            self.pack();
        }
        self.trim();
    }

    /// Once the newest frames (not text) fill a block, pack them.
    fn pack(&mut self) {
        let newest = self
            .entries
            .iter()
            .rev()
            .take_while(|e| matches!(e, Entry::Frame(_)))
            .count();
        if newest < PACKED_FRAMES {
            return;
        }
        let from = self.entries.len() - newest;
        let frames: Vec<Arc<SharedFrame>> = self
            .entries
            .drain(from..from + PACKED_FRAMES)
            .filter_map(|e| match e {
                Entry::Frame(f) => Some(f),
                _ => None,
            })
            .collect();
        let block = Packed::new(&frames);
        self.bytes = self.bytes + block.bytes() - frames.iter().map(|f| f.len()).sum::<usize>();
        self.entries.insert(from, Entry::Packed(Box::new(block)));
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
        let mut unreadable = false;
        for entry in &self.entries {
            match entry {
                Entry::Frame(f) if f.seq.unwrap_or(0) > last_seq => frames.push(f.clone()),
                Entry::Frame(_) => {}
                Entry::Packed(block) if entry.last_seq() > last_seq => {
                    match block.frames_after(last_seq) {
                        Some(unpacked) => frames.extend(unpacked),
                        None => {
                            tracing::error!("a packed block of replayed frames cannot be read");
                            unreadable = true;
                        }
                    }
                }
                Entry::Packed(_) => {}
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
            needs_snapshot: last_seq < self.dropped_through || unreadable,
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

    /// A tool card's end, as a W1 turn's are.
    fn card(i: u64) -> ServerEvent {
        ServerEvent::ToolCallUpdate {
            tool_call_id: format!("call_{i}~x1"),
            name: "memory_write".into(),
            status: weft_protocol::ToolCallStatus::End,
            args: Some(serde_json::json!({"key": format!("k{i}"), "value": "r".repeat(100)})),
            result: Some(format!("stored k{i}")),
            is_error: Some(false),
            parent_id: None,
            depth: 0,
            metadata: None,
        }
    }

    /// Keep a tool card numbered `seq` in `replay`; the frame as sent.
    fn push_card(replay: &mut Replay, seq: u64) -> Arc<SharedFrame> {
        let frame = SharedFrame::encode(&ServerFrame {
            thread_id: Some(Arc::from("t")),
            seq: Some(seq),
            event: card(seq),
        });
        replay.push(&card(seq), seq, &frame);
        frame
    }

    fn json_of(frames: &[Arc<SharedFrame>]) -> Vec<String> {
        frames.iter().map(|f| f.json().to_owned()).collect()
    }

    #[test]
    fn older_frames_are_packed_and_come_back_as_they_were() {
        let mut packed = Replay::new(1 << 20);
        let mut sent = Vec::new();
        for seq in 1..=80 {
            sent.push(push_card(&mut packed, seq));
        }
        let raw: usize = sent.iter().map(|f| f.len()).sum();
        // Five blocks.
        assert_eq!(packed.entries.len(), 5);
        assert!(
            packed.bytes() * 3 < raw,
            "{} of {raw} bytes",
            packed.bytes()
        );
        let t: Arc<str> = Arc::from("t");
        let all = packed.after(0, &t);
        assert!(!all.needs_snapshot);
        assert_eq!(json_of(&all.frames), json_of(&sent));
        assert!(all
            .frames
            .iter()
            .zip(1..)
            .all(|(f, seq)| f.seq == Some(seq)));
        // From inside a block: only what came after.
        let missed = packed.after(21, &t);
        assert_eq!(json_of(&missed.frames), json_of(&sent[21..]));
        assert!(packed.after(80, &t).frames.is_empty());
    }

    #[test]
    fn frames_encoded_elsewhere_come_back_byte_for_byte() {
        // Frames relayed from another replica are kept as their bytes, whatever their layout.
        let mut r = Replay::new(1 << 20);
        let sent: Vec<Arc<SharedFrame>> = (1..=16)
            .map(|seq| {
                let json = format!("{{\n  \"seq\": {seq},\n  \"type\": \"pong\"\n}}");
                SharedFrame::from_json(Some(seq), Bytes::from(json))
            })
            .collect();
        for frame in &sent {
            r.push(&ServerEvent::Pong, frame.seq.unwrap(), frame);
        }
        assert!(matches!(r.entries.front(), Some(Entry::Packed(_))));
        let t: Arc<str> = Arc::from("t");
        assert_eq!(json_of(&r.after(0, &t).frames), json_of(&sent));
    }

    #[test]
    fn packed_frames_keep_seqs_far_above_zero_and_apart() {
        // A later turn numbers its frames from a floor above 2^32; seqs skip too.
        let floor = 100 << 26;
        let mut packed = Replay::new(1 << 20);
        let mut sent = Vec::new();
        for at in 0..40 {
            sent.push(push_card(&mut packed, floor + at * 3));
        }
        let t: Arc<str> = Arc::from("t");
        let all = packed.after(0, &t);
        assert_eq!(json_of(&all.frames), json_of(&sent));
        let seqs = |frames: &[Arc<SharedFrame>]| frames.iter().map(|f| f.seq).collect::<Vec<_>>();
        assert_eq!(seqs(&all.frames), seqs(&sent));
        // From between two frames of a block.
        let missed = packed.after(floor + 20 * 3 + 1, &t);
        assert_eq!(seqs(&missed.frames), seqs(&sent[21..]));
    }

    #[test]
    fn text_between_frames_keeps_its_place_when_they_are_packed() {
        let mut r = Replay::new(1 << 20);
        let mut seq = 0;
        let mut expected = Vec::new();
        for round in 0..3 {
            for _ in 0..12 {
                seq += 1;
                push(&mut r, seq, ServerEvent::Pong);
                expected.push(format!("{seq}:*"));
            }
            seq += 1;
            push(&mut r, seq, chunk(&format!("text {round}"), 0));
            expected.push(format!("{seq}:text {round}"));
        }
        // Each round's 12 frames stop short of a block: nothing is packed yet.
        assert!(r.entries.iter().all(|e| !matches!(e, Entry::Packed(_))));
        for _ in 0..40 {
            seq += 1;
            push(&mut r, seq, ServerEvent::Pong);
            expected.push(format!("{seq}:*"));
        }
        assert!(r.entries.iter().any(|e| matches!(e, Entry::Packed(_))));
        let t: Arc<str> = Arc::from("t");
        assert_eq!(texts(&r.after(0, &t)), expected);
    }

    #[test]
    fn packed_blocks_count_against_the_bound_and_go_whole() {
        let mut r = Replay::new(4_000);
        for seq in 1..=400 {
            push(&mut r, seq, card(seq));
        }
        assert!(r.bytes() <= 4_000, "{} bytes kept", r.bytes());
        let t: Arc<str> = Arc::from("t");
        let missed = r.after(0, &t);
        assert!(missed.needs_snapshot);
        let first = missed.frames[0].seq.unwrap();
        assert_eq!(
            r.dropped_through + 1,
            first,
            "no gap after what was dropped"
        );
        assert_eq!(missed.frames.last().unwrap().seq, Some(400));
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
