//! Publishing: a channel's publications checked against its namespace, given their versions by
//! the partition's committer, and answered once their transaction committed; and the publisher's
//! truth of a channel (`GET /canvases/{id}`, `GET /channels/{id}`).

use super::{Pixel, Versions};
use crate::idempotency::Lookup;
use crate::log::EventLog;
use crate::partition::Pending;
use crate::types::{CanvasTruth, Fingerprint, PublishError, Published};
use shared::model::Data;
use shared::{ChannelId, Color};

impl<L: EventLog> Versions<L> {
    /// Publishes one pixel change: hands out the channel's next version and returns once the
    /// transaction carrying it committed.
    ///
    /// # Errors
    /// See [`Versions::publish_with_key`].
    pub async fn publish(&self, channel: &ChannelId, x: u32, y: u32, color: Color) -> Result<Published, PublishError> {
        self.publish_with_key(channel, x, y, color, None).await.map(|(p, _)| p)
    }

    /// Publishes one pixel change, at most once per `idempotency_key`: returns the result and
    /// whether it is the replay of an earlier request with the same key.
    ///
    /// # Errors
    /// [`PublishError::NotReady`] before the rebuild (or after a producer failed for good),
    /// [`PublishError::Fenced`] after another publisher took over, [`PublishError::OutOfBounds`]
    /// for a pixel outside the canvas (nothing is published), [`PublishError::NotWritten`] when the
    /// transaction did not commit (no version is used), [`PublishError::Unknown`] when its commit
    /// was not confirmed in time, [`PublishError::KeyConflict`] / [`PublishError::KeyInFlight`]
    /// for a reused key.
    pub async fn publish_with_key(
        &self,
        channel: &ChannelId,
        x: u32,
        y: u32,
        color: Color,
        idempotency_key: Option<&str>,
    ) -> Result<(Published, bool), PublishError> {
        self.publish_many(channel, &[(x, y, color, idempotency_key)]).await.into_iter().next().unwrap_or(Err(PublishError::NotReady))
    }

    /// Publishes `pixels` of one channel (the `pixels` model's data), as [`Versions::publish_data`].
    pub async fn publish_many(&self, channel: &ChannelId, pixels: &[Pixel<'_>]) -> Vec<Result<(Published, bool), PublishError>> {
        let datas: Vec<Box<Data>> = pixels.iter().map(|&(x, y, color, _)| shared::model::pixels::Paint { x, y, color }.to_data()).collect();
        let items: Vec<(&Data, Option<&str>)> = datas.iter().zip(pixels).map(|(d, p)| (d.as_ref(), p.3)).collect();
        self.publish_data(channel, &items).await
    }

    /// Publishes `items` (data, and its `Idempotency-Key`) to one channel, in order, in one
    /// transaction (consecutive versions, as group records). Returns one result per item up to
    /// and including the first that failed before it could be written (data the channel's model
    /// refuses, a state past its limit, a reused key): the items after it are not attempted, so
    /// the channel never gets a later publication without an earlier one. Items whose key was
    /// already applied are answered with their first result and not written again.
    pub async fn publish_data(&self, channel: &ChannelId, items: &[(&Data, Option<&str>)]) -> Vec<Result<(Published, bool), PublishError>> {
        if let Some(e) = self.not_writable() {
            return vec![Err(e)];
        }
        let namespace = match self.namespaces.of(channel) {
            Ok(ns) => ns,
            Err(e) => return vec![Err(PublishError::UnknownNamespace(e.to_string()))],
        };
        // A channel without a committed event is a new one. (Checked against committed channels:
        // first publishes of new channels racing each other may pass the limit by those in flight;
        // at the limit, a publish to a channel whose first event is not committed yet is refused.)
        if self.partition(channel).is_some_and(|(_, p)| !p.has(channel)) && self.channel_count() >= self.max_channels {
            return vec![Err(PublishError::ChannelLimit { limit: self.max_channels })];
        }
        // The first item the namespace refuses (its data, or the state after it), if any.
        let refused = items.iter().enumerate().find_map(|(i, (data, _))| {
            let size = data.get().len();
            if size > namespace.max_data_bytes {
                return Some((i, PublishError::DataTooLarge { size, limit: namespace.max_data_bytes }));
            }
            namespace.model.validate(data).err().map(|e| (i, PublishError::from(e)))
        });
        let refused = refused.or_else(|| {
            let (_, p) = self.partition(channel)?;
            let datas: Vec<&Data> = items.iter().map(|(d, _)| *d).collect();
            p.check_states(channel, &datas, namespace.max_state_bytes).err().map(|(i, e)| (i, PublishError::from(e)))
        });
        let mut results: Vec<Option<Result<(Published, bool), PublishError>>> = Vec::with_capacity(items.len());
        let mut unit: Vec<(usize, Pending)> = Vec::new();
        for (i, &(data, key)) in items.iter().enumerate() {
            if let Some((_, e)) = refused.as_ref().filter(|(at, _)| *at == i) {
                results.push(Some(Err(e.clone())));
                break;
            }
            // Only a keyed publish is ever compared with another (its canonical JSON is work).
            let fp = match key {
                Some(_) => Fingerprint::of(channel, data),
                None => Fingerprint { channel: channel.clone(), data: String::new() },
            };
            if let Some(k) = key {
                let lookup = self.lock_keys().begin(k, &fp, shared::event::now_ms());
                match lookup {
                    Lookup::New => {}
                    Lookup::Replay(p) => {
                        results.push(Some(Ok((p, true))));
                        continue;
                    }
                    Lookup::Conflict => {
                        results.push(Some(Err(PublishError::KeyConflict)));
                        break;
                    }
                    Lookup::InFlight => {
                        results.push(Some(Err(PublishError::KeyInFlight)));
                        break;
                    }
                    Lookup::Full { retry_after_ms } => {
                        results.push(Some(Err(self.store_full(retry_after_ms))));
                        break;
                    }
                }
            }
            unit.push((results.len(), Pending { fp, data: data.to_owned(), key: key.map(str::to_owned) }));
            results.push(None);
        }
        if !unit.is_empty() {
            let (slots, events): (Vec<usize>, Vec<Pending>) = unit.into_iter().unzip();
            match self.submit(channel, events).await {
                Ok(published) => {
                    for (slot, p) in slots.into_iter().zip(published) {
                        results[slot] = Some(Ok((p, false)));
                    }
                }
                Err(e) => {
                    for slot in slots {
                        results[slot] = Some(Err(e.clone()));
                    }
                }
            }
        }
        results.into_iter().map(|r| r.expect("every item up to the first failure has a result")).collect()
    }

    /// The refusal of a new key while the key store is full (counted).
    fn store_full(&self, retry_after_ms: u64) -> PublishError {
        self.counters.metrics.idempotency_store_full.inc();
        PublishError::IdempotencyStoreFull {
            retry_after_secs: retry_after_ms.div_ceil(1_000),
            capacity: self.lock_keys().capacity(),
            window_secs: self.key_window_ms() / 1_000,
        }
    }

    /// Queues `events` of `channel` for its partition's next transaction and waits for the answer
    /// (at most [`Timings::answer_timeout`]).
    async fn submit(&self, channel: &ChannelId, events: Vec<Pending>) -> Result<Vec<Published>, PublishError> {
        let Some((ctx, p)) = self.partition(channel) else {
            let (mut keys, now_ms) = (self.lock_keys(), shared::event::now_ms());
            for e in &events {
                if let Some(k) = &e.key {
                    keys.finish(k, &e.fp, None, now_ms);
                }
            }
            return Err(PublishError::NotReady);
        };
        let (id, mut answer) = p.push(channel.clone(), events);
        ctx.wake(&p);
        let wait = self.timings.answer_timeout;
        match tokio::time::timeout(wait, &mut answer).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(PublishError::Unknown("the partition's committer stopped".into())),
            Err(_) => match p.withdraw(id) {
                Some(events) => {
                    ctx.release(&events);
                    Err(PublishError::NotWritten(format!("waited {} ms for partition {}'s transaction; nothing was written", wait.as_millis(), p.id)))
                }
                None => answer.try_recv().unwrap_or_else(|_| {
                    Err(PublishError::Unknown(format!("partition {}'s transaction did not end within {} ms", p.id, wait.as_millis())))
                }),
            },
        }
    }

    /// The publisher's truth for `channel` (version 0 and the all-white hash when it has no events).
    ///
    /// # Errors
    /// [`PublishError::NotReady`] before the rebuild, [`PublishError::Fenced`] once another
    /// publisher took over (this one's heads are no longer the log's).
    pub async fn truth(&self, channel: &ChannelId) -> Result<CanvasTruth, PublishError> {
        if self.status.is_fenced() {
            return Err(PublishError::Fenced);
        }
        self.namespaces.of(channel).map_err(|e| PublishError::UnknownNamespace(e.to_string()))?;
        let Some((_, p)) = self.partition(channel) else { return Err(PublishError::NotReady) };
        Ok(match p.truth(channel) {
            Some((version, hash)) => CanvasTruth { canvas: channel.clone(), version, hash },
            None => CanvasTruth { canvas: channel.clone(), version: 0, hash: crate::heads::Head::of(&self.namespaces, channel).hash() },
        })
    }

    /// The publisher's truth for `channel`: its model, committed version, state (JSON text) and
    /// hash (version 0 and the empty state when it has no publication).
    ///
    /// # Errors
    /// As [`Versions::truth`]; [`PublishError::UnknownNamespace`] for a channel of no namespace.
    pub async fn channel_truth(&self, channel: &ChannelId) -> Result<crate::types::ChannelTruth, PublishError> {
        if self.status.is_fenced() {
            return Err(PublishError::Fenced);
        }
        let ns = self.namespaces.of(channel).map_err(|e| PublishError::UnknownNamespace(e.to_string()))?;
        let Some((_, p)) = self.partition(channel) else { return Err(PublishError::NotReady) };
        let (version, hash, state) = p.view(channel).unwrap_or_else(|| {
            let empty = ns.model.empty();
            let mut json = Vec::new();
            empty.write_json(&mut json);
            (0, empty.hash(), json)
        });
        let state = serde_json::value::RawValue::from_string(String::from_utf8(state).expect("JSON is UTF-8")).expect("a state's JSON form is JSON");
        let epoch = self.epoch_of(channel).await;
        Ok(crate::types::ChannelTruth { channel: channel.clone(), model: ns.kind(), version, epoch, state, hash })
    }
}
