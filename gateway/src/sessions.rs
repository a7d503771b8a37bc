//! The proxied sessions this gateway holds: which node and partition each is on, and its close
//! switch (the gateway closes a session whose node is down while its partition is served
//! elsewhere). A session's end frees a place at its node for the admission queue.

use crate::admission::Admission;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// One proxied session as the gateway tracks it.
struct Proxied {
    node: String,
    partition: i32,
    close: CancellationToken,
}

/// The registry.
pub struct Sessions {
    open: Mutex<HashMap<u64, Proxied>>,
    next: AtomicU64,
}

impl Default for Sessions {
    fn default() -> Self {
        Self { open: Mutex::new(HashMap::new()), next: AtomicU64::new(1) }
    }
}

/// Unregisters a proxied session when dropped.
pub struct SessionTicket<'a> {
    sessions: &'a Sessions,
    admission: &'a Admission,
    id: u64,
    /// Cancelled when the gateway decides the session must move (its node is down and its
    /// partition is served elsewhere).
    pub moved: CancellationToken,
}

impl Drop for SessionTicket<'_> {
    fn drop(&mut self) {
        let gone = self.sessions.open.lock().expect("sessions lock").remove(&self.id);
        // A place freed at that node: its oldest waiting handshake goes next.
        if let Some(p) = gone {
            self.admission.freed(&p.node);
        }
    }
}

impl Sessions {
    /// Registers a session on `node` for a channel of `partition`; its end wakes a waiter of
    /// `admission`.
    pub fn register<'a>(&'a self, admission: &'a Admission, node: &str, partition: i32) -> SessionTicket<'a> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let moved = CancellationToken::new();
        self.open.lock().expect("sessions lock").insert(id, Proxied { node: node.to_owned(), partition, close: moved.clone() });
        SessionTicket { sessions: self, admission, id, moved }
    }

    /// Sessions open now.
    pub fn count(&self) -> usize {
        self.open.lock().expect("sessions lock").len()
    }

    /// Sessions open now, per node.
    pub fn by_node(&self) -> BTreeMap<String, usize> {
        let mut by = BTreeMap::new();
        for s in self.open.lock().expect("sessions lock").values() {
            *by.entry(s.node.clone()).or_insert(0) += 1;
        }
        by
    }

    /// Sessions on node `id` now.
    pub fn on(&self, id: &str) -> usize {
        self.open.lock().expect("sessions lock").values().filter(|s| s.node == id).count()
    }

    /// Sessions on `nodes`, per partition.
    pub fn by_partition(&self, nodes: &[&str]) -> BTreeMap<i32, usize> {
        let mut by = BTreeMap::new();
        for s in self.open.lock().expect("sessions lock").values() {
            if nodes.contains(&s.node.as_str()) {
                *by.entry(s.partition).or_default() += 1;
            }
        }
        by
    }

    /// Closes the sessions on `down` nodes whose partition another node (`owners`) serves now;
    /// returns how many it closed, per node.
    pub fn move_off(&self, down: &BTreeSet<String>, owners: &BTreeMap<i32, String>) -> BTreeMap<String, usize> {
        let mut moved: BTreeMap<String, usize> = BTreeMap::new();
        for s in self.open.lock().expect("sessions lock").values() {
            if down.contains(&s.node) && owners.get(&s.partition).is_some_and(|o| *o != s.node) && !s.close.is_cancelled() {
                s.close.cancel();
                *moved.entry(s.node.clone()).or_default() += 1;
            }
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_tickets_and_moves_close_only_sessions_served_elsewhere() {
        let adm = Admission::new(crate::admission::Settings { queue: 0, wait: std::time::Duration::ZERO, retry_after_s: 1, retry_jitter_s: 0 });
        let s = Sessions::default();
        let a = s.register(&adm, "ws-1", 0);
        let b = s.register(&adm, "ws-1", 1);
        let c = s.register(&adm, "ws-2", 1);
        assert_eq!(s.count(), 3);
        assert_eq!(s.by_node(), BTreeMap::from([("ws-1".to_owned(), 2), ("ws-2".to_owned(), 1)]));
        assert_eq!(s.on("ws-1"), 2);
        assert_eq!(s.by_partition(&["ws-1"]), BTreeMap::from([(0, 1), (1, 1)]));
        // ws-1 down; partition 1 is served by ws-2, partition 0 by nobody.
        let moved = s.move_off(&BTreeSet::from(["ws-1".to_owned()]), &BTreeMap::from([(1, "ws-2".to_owned())]));
        assert_eq!(moved, BTreeMap::from([("ws-1".to_owned(), 1)]));
        assert!(b.moved.is_cancelled() && !a.moved.is_cancelled() && !c.moved.is_cancelled());
        // Already closed: not counted twice.
        assert!(s.move_off(&BTreeSet::from(["ws-1".to_owned()]), &BTreeMap::from([(1, "ws-2".to_owned())])).is_empty());
        drop(b);
        assert_eq!(s.count(), 2);
    }
}
