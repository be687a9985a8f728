//! Catch-up before boot, for the whole OSD: which PGs to ask about, how
//! many requests each primary has at once, and which answers are still
//! wanted. See `pg::catch_up` for what one PG does.
//!
//! An OSD that was down missed every write of its PGs meanwhile. Without
//! this, its first peering after boot carries all of them: the primaries
//! compact their logs and the returning OSD merges them, PG after PG, while
//! every client write to those PGs waits. Asked before boot, the same work
//! is done while the PGs keep serving (a request costs its primary one
//! compaction, and each primary has at most [`CATCH_UP_PER_PRIMARY`] at
//! once, so its clients wait for one at a time), and the peering at boot
//! merges only what was written during the catch-up.
//!
//! Must never: take an answer once the catch-up has ended (the OSD may be
//! up and its PGs peering), or one for a request not made.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use cairn_types::{OsdId, PgId};
use cairn_wire::{LogBase, LogEntry, PgBody, PgInfo, PgMessage};

use super::OsdCore;
use crate::io::OsdIo;

/// Catch-up requests one primary has from this OSD at once.
pub const CATCH_UP_PER_PRIMARY: usize = 2;

#[derive(Debug, Default)]
pub(crate) struct CatchUp {
    /// PGs not asked about yet, per primary.
    queued: BTreeMap<OsdId, VecDeque<(PgId, LogBase)>>,
    /// Asked and not answered: the primary asked and the base sent.
    asked: BTreeMap<PgId, (OsdId, LogBase)>,
    began: Duration,
    /// PGs that took entries, changes taken, PGs refused.
    pgs: usize,
    changes: usize,
    refused: usize,
}

impl OsdCore {
    /// Before booting, while the map records this OSD down: ask the acting
    /// primary of every PG this OSD holds a complete copy of for the log
    /// after this copy's newest entry. Returns how many PGs were queued
    /// (0: nothing to catch up; boot at once). Answers are taken until
    /// [`OsdCore::end_catch_up`].
    pub fn start_catch_up(&mut self, io: &mut dyn OsdIo) -> usize {
        if self.map.epoch == 0 || self.map.is_up(self.id) || self.catch_up.is_some() {
            return 0;
        }
        let mut state = CatchUp {
            began: io.now(),
            ..CatchUp::default()
        };
        let mut queued = 0;
        for (&pgid, pg) in &self.pgs {
            let Some(base) = pg.catch_up_base() else {
                continue;
            };
            let Some(primary) = self.map.acting(pgid).primary() else {
                continue;
            };
            if primary == self.id || !self.map.is_up(primary) {
                continue;
            }
            state
                .queued
                .entry(primary)
                .or_default()
                .push_back((pgid, base));
            queued += 1;
        }
        if queued == 0 {
            return 0;
        }
        tracing::info!(
            "osd.{}: catching up {queued} PGs from their primaries before booting",
            self.id
        );
        let primaries: Vec<OsdId> = state.queued.keys().copied().collect();
        self.catch_up = Some(state);
        for primary in primaries {
            for _ in 0..CATCH_UP_PER_PRIMARY {
                self.ask_next(primary, io);
            }
        }
        queued
    }

    /// Are catch-up requests still unanswered?
    pub fn catching_up(&self) -> bool {
        self.catch_up
            .as_ref()
            .is_some_and(|c| !c.asked.is_empty() || c.queued.values().any(|q| !q.is_empty()))
    }

    /// End the catch-up (all answered, or out of time): later answers are
    /// dropped.
    pub fn end_catch_up(&mut self) {
        let Some(c) = self.catch_up.take() else {
            return;
        };
        let unanswered = c.asked.len() + c.queued.values().map(VecDeque::len).sum::<usize>();
        tracing::info!(
            "osd.{}: caught up {} PGs ({} changes) before booting; {} refused, {unanswered} unanswered",
            self.id,
            c.pgs,
            c.changes,
            c.refused
        );
    }

    /// PGs caught up before boot so far, and the changes they took (for
    /// tests).
    pub fn caught_up(&self) -> Option<(usize, usize)> {
        self.catch_up.as_ref().map(|c| (c.pgs, c.changes))
    }

    fn ask_next(&mut self, primary: OsdId, io: &mut dyn OsdIo) {
        let epoch = self.map.epoch;
        let Some(state) = self.catch_up.as_mut() else {
            return;
        };
        let Some((pg, base)) = state.queued.get_mut(&primary).and_then(VecDeque::pop_front) else {
            return;
        };
        state.asked.insert(pg, (primary, base.clone()));
        io.send(
            primary,
            PgMessage {
                pg,
                epoch,
                body: PgBody::CatchUp { base },
            },
        );
    }

    /// An answer to a catch-up request.
    pub(super) fn got_catch_up_log(
        &mut self,
        from: OsdId,
        pg: PgId,
        base: LogBase,
        result: Result<(PgInfo, Vec<LogEntry>), String>,
        io: &mut dyn OsdIo,
    ) {
        let Some(state) = self.catch_up.as_mut() else {
            return;
        };
        if state.asked.get(&pg) != Some(&(from, base.clone())) {
            return;
        }
        state.asked.remove(&pg);
        let taken = match result {
            Ok((info, entries)) => self
                .with_pg(pg, io, |p, ctx| p.take_catch_up(ctx, &base, &info, entries))
                .unwrap_or_else(|| Err("the PG is gone".into())),
            Err(why) => Err(format!("osd.{from} refused: {why}")),
        };
        if let Some(state) = self.catch_up.as_mut() {
            match taken {
                Ok(changes) => {
                    state.pgs += 1;
                    state.changes += changes;
                }
                Err(why) => {
                    tracing::info!("osd.{}: pg {pg}: no catch-up before boot: {why}", self.id);
                    state.refused += 1;
                }
            }
        }
        self.ask_next(from, io);
        if !self.catching_up() {
            if let Some(state) = &self.catch_up {
                tracing::debug!(
                    "osd.{}: catch-up answered in {} ms",
                    self.id,
                    io.now().saturating_sub(state.began).as_millis()
                );
            }
        }
    }

    /// The connection to `osd` was lost: its unanswered requests will not
    /// be answered, and the PGs queued for it are not asked.
    pub(super) fn catch_up_reset(&mut self, osd: OsdId) {
        let Some(state) = self.catch_up.as_mut() else {
            return;
        };
        let before = state.asked.len();
        state.asked.retain(|_, (p, _)| *p != osd);
        let lost = before - state.asked.len();
        let skipped = state.queued.remove(&osd).map_or(0, |q| q.len());
        state.refused += lost + skipped;
    }
}
