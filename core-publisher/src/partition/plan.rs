//! A transaction's plan: the versions of its units' events and the records they go in.

use super::Pending;
use crate::log::Record;
use shared::event::MAX_EVENTS_PER_RECORD;
use shared::record::{ChannelOp, OpKind, Publication};
use shared::ChannelId;
use std::collections::HashMap;

/// What [`plan`] needs of a channel's committed head.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeadAt {
    pub version: u64,
    /// Its reset count.
    pub resets: u64,
    /// No head: never published, or deleted.
    pub headless: bool,
    /// The partition's reset floor ([`super::Book::floor`]): a headless channel's next history starts
    /// there (with a reset record, when it is above 0).
    pub floor: u64,
}

/// `items` cut into records: at most [`MAX_EVENTS_PER_RECORD`] each, and at most
/// [`shared::record::MAX_GROUP_DATA_BYTES`] of data (`bytes` of each) unless one alone is more.
fn group_chunks<T>(items: &[T], bytes: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut chunks = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let b = bytes(item);
        if i > start && (i - start == MAX_EVENTS_PER_RECORD || size + b > shared::record::MAX_GROUP_DATA_BYTES) {
            chunks.push(&items[start..i]);
            (start, size) = (i, 0);
        }
        size += b;
    }
    if start < items.len() {
        chunks.push(&items[start..]);
    }
    chunks
}

/// Units to plan: (partition, channel, events, op).
pub type PlanInput<'a> = [(i32, &'a ChannelId, &'a [Pending], Option<OpKind>)];

/// Where each event of each unit went: (record index, its event). An op unit has one entry, its
/// op record and a stand-in publication whose version is the reset count of the history the op
/// starts (none when there was nothing to do: the channel was deleted already).
pub type Placement = Vec<Vec<(usize, Publication)>>;

/// A channel's course through one plan.
#[derive(Clone, Copy)]
enum Course {
    Live { version: u64, resets: u64 },
    /// Deleted (or never published, in a partition with a reset floor): its next history starts
    /// at this reset count.
    Deleted { next: u64 },
}

/// Gives the units' events their versions (each channel continues from its committed head,
/// `head_of`, in unit order) and groups each channel's events into records of at most
/// [`MAX_EVENTS_PER_RECORD`], each on the channel's partition; an op unit is an op record of its
/// own, after which versions start at 1 again. A headless channel (never published, or deleted)
/// of a partition whose reset floor is above 0 gets a reset to the floor before its first event;
/// a delete raises its partition's floor to one more than the deleted history's reset count, and
/// the channel's next history starts at the floor, in the order of the records (as every reader
/// of the log computes it). Pure.
pub fn plan(units: &PlanInput<'_>, head_of: impl Fn(i32, &ChannelId) -> HeadAt, now_ms: u64) -> (Vec<Record>, Placement) {
    // Each channel's events in unit order: (unit, event index), `None` for an op unit.
    let mut order: Vec<(i32, &ChannelId)> = Vec::new();
    let mut of_channel: HashMap<(i32, &ChannelId), Vec<(usize, Option<usize>)>> = HashMap::new();
    for (u, (partition, channel, events, op)) in units.iter().enumerate() {
        let list = of_channel.entry((*partition, *channel)).or_insert_with(|| {
            order.push((*partition, *channel));
            Vec::new()
        });
        match op {
            Some(_) => list.push((u, None)),
            None => list.extend((0..events.len()).map(|i| (u, Some(i)))),
        }
    }
    let mut records: Vec<Record> = Vec::new();
    let mut slots: Vec<Vec<Option<(usize, Publication)>>> = units.iter().map(|(_, _, e, op)| vec![None; if op.is_some() { 1 } else { e.len() }]).collect();
    let stand_in = |channel: &ChannelId, resets: u64| Publication {
        channel: channel.clone(),
        version: resets,
        data: serde_json::value::RawValue::from_string("null".into()).expect("null is JSON"),
        published_at_ms: now_ms,
    };
    // Each partition's reset floor as the plan's deletes raise it.
    let mut floors: HashMap<i32, u64> = HashMap::new();
    for (partition, channel) in &order {
        let head = head_of(*partition, channel);
        let floor = *floors.entry(*partition).or_insert(head.floor);
        let mut course = if head.headless && floor > 0 { Course::Deleted { next: floor } } else { Course::Live { version: head.version, resets: head.resets } };
        let op_record = |records: &mut Vec<Record>, op: OpKind, resets: u64| {
            records.push(Record::of_op(*partition, ChannelOp { op, channel: (*channel).clone(), resets, published_at_ms: now_ms }));
            records.len() - 1
        };
        let entries = &of_channel[&(*partition, *channel)];
        let mut at = 0;
        while at < entries.len() {
            let (u, event) = entries[at];
            let Some(_) = event else {
                // An op unit.
                let op = units[u].3.expect("an entry without an event is an op");
                let (record, next) = match (op, course) {
                    (OpKind::Reset, Course::Live { resets, .. }) => (Some(op_record(&mut records, op, resets + 1)), Course::Live { version: 0, resets: resets + 1 }),
                    (OpKind::Reset, Course::Deleted { next }) => (Some(op_record(&mut records, op, next)), Course::Live { version: 0, resets: next }),
                    (OpKind::Delete, Course::Live { resets, .. }) => {
                        let floor = floors.entry(*partition).or_insert(head.floor);
                        *floor = (*floor).max(resets + 1);
                        (Some(op_record(&mut records, op, resets)), Course::Deleted { next: *floor })
                    }
                    (OpKind::Delete, Course::Deleted { .. }) => (None, course),
                };
                course = next;
                let starts = match next {
                    Course::Live { resets, .. } => resets,
                    Course::Deleted { next } => next,
                };
                slots[u] = vec![record.map(|r| (r, stand_in(channel, starts)))];
                at += 1;
                continue;
            };
            // A run of events up to the next op unit.
            let run_end = entries[at..].iter().position(|(_, e)| e.is_none()).map_or(entries.len(), |n| at + n);
            let run = &entries[at..run_end];
            let mut version = match course {
                Course::Live { version, .. } => version,
                Course::Deleted { next } => {
                    op_record(&mut records, OpKind::Reset, next);
                    course = Course::Live { version: 0, resets: next };
                    0
                }
            };
            for chunk in group_chunks(run, |&(u, e)| units[u].2[e.expect("a run holds events")].data.get().len()) {
                let record = records.len();
                let mut r = Record::of_events(*partition, Vec::with_capacity(chunk.len()), Vec::with_capacity(chunk.len()));
                for &(u, e) in chunk {
                    let e = e.expect("a run holds events");
                    let p = &units[u].2[e];
                    version += 1;
                    let ev = Publication {
                        channel: (*channel).clone(),
                        version,
                        data: p.data.clone(),
                        published_at_ms: now_ms,
                    };
                    r.events.push(ev.clone());
                    r.keys.push(p.key.clone());
                    slots[u][e] = Some((record, ev));
                }
                records.push(r);
            }
            if let Course::Live { resets, .. } = course {
                course = Course::Live { version, resets };
            }
            at = run_end;
        }
    }
    let placed = slots.into_iter().map(|s| s.into_iter().flatten().collect()).collect();
    (records, placed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::tests::{id, pending};

    /// (units as (partition, channel, events), heads: "a" at 4) → versions per unit and records
    /// (partition, channel, first version, events).
    #[test]
    fn plan_table() {
        let version_of = |_: i32, c: &ChannelId| HeadAt { version: if c.as_str() == "a" { 4 } else { 0 }, ..HeadAt::default() };
        type Case = (&'static str, Vec<(i32, &'static str, usize)>, Vec<Vec<u64>>, Vec<(i32, &'static str, u64, usize)>);
        let cases: Vec<Case> = vec![
            ("one publish continues the head", vec![(0, "a", 1)], vec![vec![5]], vec![(0, "a", 5, 1)]),
            ("a new canvas starts at 1", vec![(1, "b", 1)], vec![vec![1]], vec![(1, "b", 1, 1)]),
            (
                "units of one canvas share a record, in unit order; canvases keep their partitions",
                vec![(0, "a", 1), (1, "b", 2), (0, "a", 2)],
                vec![vec![5], vec![1, 2], vec![6, 7]],
                vec![(0, "a", 5, 3), (1, "b", 1, 2)],
            ),
            ("a batch of 600 for one canvas: records of 256, 256, 88", vec![(2, "b", 600)], vec![(1..=600).collect()], vec![(2, "b", 1, 256), (2, "b", 257, 256), (2, "b", 513, 88)]),
        ];
        for (name, units, want_versions, want_records) in cases {
            let ids: Vec<ChannelId> = units.iter().map(|(_, c, _)| id(c)).collect();
            let events: Vec<Vec<Pending>> = units.iter().map(|(_, c, n)| (0..*n).map(|i| pending(c, i as u32 % 8, None)).collect()).collect();
            let input: Vec<(i32, &ChannelId, &[Pending], Option<OpKind>)> = units.iter().enumerate().map(|(i, (p, _, _))| (*p, &ids[i], events[i].as_slice(), None)).collect();
            let (records, placed) = plan(&input, version_of, 7);
            let versions: Vec<Vec<u64>> = placed.iter().map(|u| u.iter().map(|(_, e)| e.version).collect()).collect();
            assert_eq!(versions, want_versions, "{name}");
            let shape: Vec<(i32, &str, u64, usize)> =
                records.iter().map(|r| (r.partition, r.events[0].channel.as_str(), r.events[0].version, r.events.len())).collect();
            assert_eq!(shape, want_records, "{name}");
            for (u, slots) in placed.iter().enumerate() {
                for (e, (rec, ev)) in slots.iter().enumerate() {
                    assert!(records[*rec].events.contains(ev), "{name}: unit {u} event {e} is not in record {rec}");
                    assert_eq!(ev.data.get(), events[u][e].data.get(), "{name}: the event carries its own data");
                }
            }
        }
    }

    /// Ops among the units: (the partition's reset floor at 3; heads: "a" at version 4 of reset 2,
    /// "z" at version 1 of reset 7, "d" headless),
    /// units as (channel, events or an op) → the records, as `op:resets` or `first version x
    /// events`, and each unit's versions (an op's: the reset count of the history it starts, or
    /// none when it did nothing).
    #[test]
    fn plan_with_ops_table() {
        let head_of = |_: i32, c: &ChannelId| match c.as_str() {
            "a" => HeadAt { version: 4, resets: 2, headless: false, floor: 3 },
            "z" => HeadAt { version: 1, resets: 7, headless: false, floor: 3 },
            "d" => HeadAt { version: 0, resets: 0, headless: true, floor: 3 },
            _ => HeadAt { version: 0, resets: 0, headless: false, floor: 3 },
        };
        enum U {
            Events(&'static str, usize),
            Op(&'static str, OpKind),
        }
        use OpKind::{Delete, Reset};
        type Case = (&'static str, Vec<U>, Vec<&'static str>, Vec<Vec<u64>>);
        let cases: Vec<Case> = vec![
            ("a delete raises the floor, for a headless channel after it in the plan", vec![U::Op("z", Delete), U::Events("d", 1)], vec!["z delete:7", "d reset:8", "d 1x1"], vec![vec![8], vec![1]]),
            ("two deletes in one plan: the later's next history starts at the raised floor", vec![U::Op("z", Delete), U::Op("a", Delete)], vec!["z delete:7", "a delete:2"], vec![vec![8], vec![8]]),
            ("two resets in a row: each answers its own count", vec![U::Op("a", Reset), U::Op("a", Reset)], vec!["a reset:3", "a reset:4"], vec![vec![3], vec![4]]),
            ("a reset starts versions again, in unit order", vec![U::Events("a", 2), U::Op("a", Reset), U::Events("a", 2)], vec!["a 5x2", "a reset:3", "a 1x2"], vec![vec![5, 6], vec![3], vec![1, 2]]),
            ("a delete ends the history; a publish after it starts the next with a reset", vec![U::Op("a", Delete), U::Events("a", 1)], vec!["a delete:2", "a reset:3", "a 1x1"], vec![vec![3], vec![1]]),
            ("a channel deleted before: a reset to its next count first", vec![U::Events("d", 2)], vec!["d reset:3", "d 1x2"], vec![vec![1, 2]]),
            ("a second delete does nothing", vec![U::Op("a", Delete), U::Op("a", Delete)], vec!["a delete:2"], vec![vec![3], vec![]]),
            ("a reset of a deleted channel starts its next history", vec![U::Op("d", Reset), U::Events("d", 1)], vec!["d reset:3", "d 1x1"], vec![vec![3], vec![1]]),
            ("other channels are not touched", vec![U::Events("b", 1), U::Op("a", Reset), U::Events("b", 1)], vec!["b 1x2", "a reset:3"], vec![vec![1], vec![3], vec![2]]),
        ];
        for (name, units, want_records, want_versions) in cases {
            let ids: Vec<ChannelId> = units.iter().map(|u| id(match u { U::Events(c, _) | U::Op(c, _) => c })).collect();
            let events: Vec<Vec<Pending>> = units.iter().map(|u| match u { U::Events(c, n) => (0..*n).map(|i| pending(c, i as u32, None)).collect(), U::Op(..) => Vec::new() }).collect();
            let input: Vec<(i32, &ChannelId, &[Pending], Option<OpKind>)> = units
                .iter()
                .enumerate()
                .map(|(i, u)| (0, &ids[i], events[i].as_slice(), match u { U::Op(_, op) => Some(*op), U::Events(..) => None }))
                .collect();
            let (records, placed) = plan(&input, head_of, 7);
            let shape: Vec<String> = records
                .iter()
                .map(|r| match &r.op {
                    Some(op) => format!("{} {}:{}", op.channel, op.op.as_str(), op.resets),
                    None => format!("{} {}x{}", r.events[0].channel, r.events[0].version, r.events.len()),
                })
                .collect();
            assert_eq!(shape, want_records, "{name}");
            let versions: Vec<Vec<u64>> = placed.iter().map(|u| u.iter().map(|(_, e)| e.version).collect()).collect();
            assert_eq!(versions, want_versions, "{name}");
        }
    }

    #[test]
    fn records_are_cut_by_count_and_by_bytes_of_data() {
        let sizes = |items: &[usize]| group_chunks(items, |b| *b).iter().map(|c| c.len()).collect::<Vec<_>>();
        let kib = 1024;
        assert_eq!(sizes(&[10; 600]), vec![256, 256, 88]);
        assert_eq!(sizes(&[100 * kib; 7]), vec![2, 2, 2, 1], "256 KiB of data per record at most");
        assert_eq!(sizes(&[1024 * kib, 1, 1]), vec![1, 2], "a publication larger than the bound is a record of its own");
        assert_eq!(sizes(&[]), Vec::<usize>::new());
    }
}
