use cairn_wire::Superseded;

use super::*;

/// The head of an authoritative log of `entries` after `tail`.
fn last(entries: &[LogEntry], tail: Version) -> Version {
    entries.last().map_or(tail, |e| e.version)
}

fn v(epoch: u32, counter: u64) -> Version {
    Version::new(epoch, counter)
}

fn modify(version: Version, prior: Version, oid: &str) -> LogEntry {
    LogEntry {
        version,
        prior_version: prior,
        reqid: Some(ReqId {
            client: 1,
            tid: version.counter,
        }),
        oid: oid.into(),
        op: LogOp::Modify,
        superseded: Vec::new(),
    }
}

fn delete(version: Version, prior: Version, oid: &str) -> LogEntry {
    LogEntry {
        op: LogOp::Delete,
        ..modify(version, prior, oid)
    }
}

#[test]
fn a_member_behind_gets_the_newer_objects_and_deletes() {
    let base = vec![
        modify(v(1, 1), Version::ZERO, "a"),
        modify(v(1, 2), Version::ZERO, "b"),
    ];
    let mine = PgLog::new(Version::ZERO, base.clone());
    let mut auth = base;
    auth.push(modify(v(2, 3), v(1, 1), "a"));
    auth.push(delete(v(2, 4), v(1, 2), "b"));
    auth.push(modify(v(2, 5), Version::ZERO, "c"));
    let local = |oid: &str| match oid {
        "a" => Some(v(1, 1)),
        "b" => Some(v(1, 2)),
        _ => None,
    };
    let merged = merge(
        &mine,
        &Missing::new(),
        Version::ZERO,
        last(&auth, Version::ZERO),
        &auth,
        local,
    )
    .unwrap();
    assert_eq!(merged.log.head(), v(2, 5));
    assert_eq!(merged.log.len(), 5);
    assert_eq!(
        merged.missing,
        Missing::from([("a".into(), v(2, 3)), ("c".into(), v(2, 5))])
    );
    assert_eq!(merged.remove, vec!["b".to_string()]);
    assert!(!merged.rewritten);
    assert_eq!(
        merged.log.find_reqid(&ReqId { client: 1, tid: 5 }),
        Some(v(2, 5))
    );
}

#[test]
fn appending_after_the_head_agrees_with_the_whole_merge() {
    let base = vec![
        modify(v(1, 1), Version::ZERO, "a"),
        modify(v(1, 2), Version::ZERO, "b"),
        modify(v(1, 3), Version::ZERO, "d"),
    ];
    let mine = PgLog::new(Version::ZERO, base.clone());
    let earlier = Missing::from([("d".to_string(), v(1, 3))]);
    let newer = vec![
        modify(v(2, 4), v(1, 1), "a"),
        delete(v(2, 5), v(1, 2), "b"),
        modify(v(2, 6), Version::ZERO, "c"),
        modify(v(2, 7), v(2, 6), "c"),
        delete(v(2, 8), v(1, 3), "d"),
    ];
    let mut auth = base;
    auth.extend(newer.iter().cloned());
    // Objects here are at versions up to this log's head.
    let local = |oid: &str| match oid {
        "a" => Some(v(1, 1)),
        "b" => Some(v(1, 2)),
        _ => None,
    };
    let whole = merge(&mine, &earlier, Version::ZERO, v(2, 8), &auth, local).unwrap();
    let appended = append_after_head(&mine, &earlier, &newer, local).unwrap();
    assert_eq!(appended.missing, whole.missing);
    assert_eq!(appended.remove, whole.remove);
    assert_eq!(
        appended.missing,
        Missing::from([("a".to_string(), v(2, 4)), ("c".to_string(), v(2, 7))])
    );
    assert_eq!(appended.remove, vec!["b".to_string()]);
    let mut grown = mine.clone();
    for e in newer.clone() {
        grown.append(e);
    }
    let ours: Vec<_> = grown.entries().cloned().collect();
    let theirs: Vec<_> = whole.log.entries().cloned().collect();
    assert_eq!(ours, theirs);
    assert_eq!(grown.head(), whole.log.head());

    // Nothing newer: nothing changes.
    let none = append_after_head(&mine, &earlier, &[], local).unwrap();
    assert_eq!(none.missing, earlier);
    assert!(none.remove.is_empty());

    // An entry at or before the head is not an append.
    let stale = vec![modify(v(1, 3), v(1, 2), "b")];
    assert!(matches!(
        append_after_head(&mine, &earlier, &stale, local),
        Err(MergeError::Conflict { .. })
    ));
    // Entries out of order (a malformed activation) are refused.
    let unordered = vec![newer[1].clone(), newer[0].clone()];
    assert!(matches!(
        append_after_head(&mine, &earlier, &unordered, local),
        Err(MergeError::Unordered { .. })
    ));
}

#[test]
fn divergent_entries_roll_back_to_the_prior_version_or_away() {
    let common = vec![modify(v(1, 1), Version::ZERO, "a")];
    let mut mine = common.clone();
    mine.push(modify(v(1, 2), v(1, 1), "a")); // divergent overwrite
    mine.push(modify(v(1, 3), Version::ZERO, "x")); // divergent create
    let mine = PgLog::new(Version::ZERO, mine);
    let mut auth = common;
    auth.push(modify(v(3, 2), Version::ZERO, "b"));
    let local = |oid: &str| match oid {
        "a" => Some(v(1, 2)),
        "x" => Some(v(1, 3)),
        _ => None,
    };
    let merged = merge(
        &mine,
        &Missing::new(),
        Version::ZERO,
        last(&auth, Version::ZERO),
        &auth,
        local,
    )
    .unwrap();
    assert_eq!(merged.divergent, 2);
    assert!(merged.rewritten);
    assert_eq!(
        merged.missing,
        Missing::from([("a".into(), v(1, 1)), ("b".into(), v(3, 2))])
    );
    assert_eq!(merged.remove, vec!["x".to_string()]);
    let versions: Vec<Version> = merged.log.entries().map(|e| e.version).collect();
    assert_eq!(versions, vec![v(1, 1), v(3, 2)]);
}

#[test]
fn a_divergent_object_touched_again_by_the_authority_takes_its_version() {
    let mine = PgLog::new(
        Version::ZERO,
        vec![
            modify(v(1, 1), Version::ZERO, "a"),
            modify(v(1, 2), v(1, 1), "a"),
        ],
    );
    let auth = vec![
        modify(v(1, 1), Version::ZERO, "a"),
        delete(v(2, 2), v(1, 1), "a"),
    ];
    let merged = merge(
        &mine,
        &Missing::new(),
        Version::ZERO,
        last(&auth, Version::ZERO),
        &auth,
        |_| Some(v(1, 2)),
    )
    .unwrap();
    assert!(merged.missing.is_empty());
    assert_eq!(merged.remove, vec!["a".to_string()]);
}

#[test]
fn members_too_far_behind_or_diverged_before_the_tail_need_backfill() {
    let mine = PgLog::new(Version::ZERO, vec![modify(v(1, 1), Version::ZERO, "a")]);
    let auth = vec![modify(v(2, 5), Version::ZERO, "b")];
    assert_eq!(
        merge(
            &mine,
            &Missing::new(),
            v(2, 4),
            last(&auth, v(2, 4)),
            &auth,
            |_| None
        )
        .unwrap_err(),
        MergeError::Behind {
            head: v(1, 1),
            auth_tail: v(2, 4)
        }
    );
    // Our head is past the tail, but we diverged before it.
    let mine = PgLog::new(
        Version::ZERO,
        vec![
            modify(v(1, 1), Version::ZERO, "a"),
            modify(v(1, 9), v(1, 1), "a"),
        ],
    );
    let auth = vec![modify(v(1, 6), Version::ZERO, "c")];
    assert!(matches!(
        merge(
            &mine,
            &Missing::new(),
            v(1, 5),
            last(&auth, v(1, 5)),
            &auth,
            |_| None
        ),
        Err(MergeError::DivergesBeforeTail { .. })
    ));
}

#[test]
fn a_split_log_without_entries_since_the_tail_catches_up_from_the_log() {
    // A split child's log: the parent's tail and head, but only its own
    // objects' entries, the newest older than the authority's tail.
    let mine = PgLog::with_head(v(1, 2), v(3, 30), vec![modify(v(1, 4), Version::ZERO, "a")]);
    let auth = vec![modify(v(3, 31), v(1, 4), "a")];
    let merged = merge(&mine, &Missing::new(), v(2, 20), v(3, 31), &auth, |_| {
        Some(v(1, 4))
    })
    .expect("a split log that reaches the tail merges");
    assert_eq!(merged.divergent, 0);
    assert_eq!(merged.missing.get("a"), Some(&v(3, 31)));
    assert_eq!(merged.log.head(), v(3, 31));
    // Equal heads, no entries either side: nothing to do.
    let mine = PgLog::with_head(v(1, 2), v(3, 30), Vec::new());
    let merged = merge(&mine, &Missing::new(), v(2, 20), v(3, 30), &[], |_| None)
        .expect("empty split logs merge");
    assert!(merged.missing.is_empty() && merged.remove.is_empty());
    // Our tail is newer than the authority's: its older entries are
    // before our log and not taken into it.
    let mine = PgLog::with_head(v(2, 25), v(3, 30), Vec::new());
    let auth = vec![
        modify(v(2, 22), Version::ZERO, "b"),
        modify(v(3, 31), Version::ZERO, "c"),
    ];
    let merged = merge(&mine, &Missing::new(), v(2, 20), v(3, 31), &auth, |_| None)
        .expect("a newer tail merges");
    assert_eq!(merged.log.entries().count(), 1);
    assert!(merged.missing.contains_key("c") && !merged.missing.contains_key("b"));
}

#[test]
fn an_identical_log_changes_nothing_and_keeps_earlier_missing() {
    let entries = vec![
        modify(v(1, 1), Version::ZERO, "a"),
        modify(v(1, 2), Version::ZERO, "b"),
    ];
    let mine = PgLog::new(Version::ZERO, entries.clone());
    let missing = Missing::from([("a".to_string(), v(1, 1))]);
    let merged = merge(
        &mine,
        &missing,
        Version::ZERO,
        last(&entries, Version::ZERO),
        &entries,
        |oid| (oid == "b").then_some(v(1, 2)),
    )
    .unwrap();
    assert_eq!(merged.missing, missing);
    assert!(merged.remove.is_empty());
    assert_eq!(merged.divergent, 0);
    assert_eq!(merged.log.head(), v(1, 2));
}

#[test]
fn trimming_keeps_the_newest_and_forgets_their_reqids() {
    let mut log = PgLog::new(Version::ZERO, Vec::new());
    for i in 1..=10 {
        log.append(modify(v(1, i), Version::ZERO, "a"));
    }
    assert_eq!(log.trim_to_weight(4), Some(v(1, 6)));
    assert_eq!(log.tail(), v(1, 6));
    assert_eq!(log.len(), 4);
    assert_eq!(log.find_reqid(&ReqId { client: 1, tid: 3 }), None);
    assert_eq!(log.find_reqid(&ReqId { client: 1, tid: 9 }), Some(v(1, 9)));
    assert_eq!(log.entries_after(v(1, 8)).count(), 2);
    assert!(log.contains(v(1, 7)) && !log.contains(v(1, 3)));
    assert_eq!(log.trim_to_weight(4), None);
}

fn folded(versions: &[Version]) -> Vec<Superseded> {
    versions
        .iter()
        .map(|&version| Superseded {
            version,
            reqid: Some(ReqId {
                client: 1,
                tid: version.counter,
            }),
            op: LogOp::Modify,
        })
        .collect()
}

#[test]
fn compacting_keeps_the_newest_entry_per_object_and_folds_the_rest() {
    let entries = vec![
        modify(v(1, 1), Version::ZERO, "a"),
        modify(v(1, 2), Version::ZERO, "b"),
        modify(v(1, 3), v(1, 1), "a"),
        modify(v(1, 4), Version::ZERO, "c"),
        delete(v(1, 5), v(1, 2), "b"),
        modify(v(1, 6), v(1, 3), "a"),
    ];
    let compacted = compact(entries.iter(), Version::ZERO);
    let versions: Vec<Version> = compacted.iter().map(|e| e.version).collect();
    assert_eq!(versions, vec![v(1, 4), v(1, 5), v(1, 6)]);
    let a = &compacted[2];
    assert_eq!(a.superseded, folded(&[v(1, 1), v(1, 3)]));
    // It stands for the object's change from before its oldest entry.
    assert_eq!(a.prior_version, Version::ZERO);
    assert_eq!(compacted[1].op, LogOp::Delete);
    assert_eq!(compacted[1].superseded, folded(&[v(1, 2)]));
    assert!(compacted[0].superseded.is_empty());
    // Nothing of the history is lost: a log of it weighs the same and
    // answers every request id.
    let log = PgLog::new(Version::ZERO, compacted.clone());
    assert_eq!(log.len(), 3);
    assert_eq!(log.weight(), entries.len());
    for e in &entries {
        assert_eq!(log.find_reqid(&e.reqid.unwrap()), Some(e.version));
    }
    // Compacting again changes nothing; versions a member holds already
    // (up to `after`) are left out.
    assert_eq!(compact(compacted.iter(), Version::ZERO), compacted);
    let after = compact(entries.iter(), v(1, 2));
    assert_eq!(after[2].superseded, folded(&[v(1, 3)]));
    assert!(after[1].superseded.is_empty());
}

/// A small deterministic generator (no dependency for one test).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// A history of `len` random writes and deletes over `objects` objects.
fn history(rng: &mut Lcg, len: u64, objects: u64) -> Vec<LogEntry> {
    let mut at = HashMap::new();
    extend(rng, &mut at, 1..=len, |c| 1 + (c / 7) as u32, objects)
}

/// Random writes and deletes at `counters` (epochs from `epoch`) over
/// objects whose versions are `at`, which follows them.
fn extend(
    rng: &mut Lcg,
    at: &mut HashMap<String, Version>,
    counters: std::ops::RangeInclusive<u64>,
    epoch: impl Fn(u64) -> u32,
    objects: u64,
) -> Vec<LogEntry> {
    counters
        .map(|counter| {
            let version = v(epoch(counter), counter);
            let oid = format!("o{}", rng.below(objects));
            let prior = at.get(&oid).copied().unwrap_or(Version::ZERO);
            if prior != Version::ZERO && rng.below(5) == 0 {
                at.remove(&oid);
                delete(version, prior, &oid)
            } else {
                at.insert(oid.clone(), version);
                modify(version, prior, &oid)
            }
        })
        .collect()
}

#[test]
fn a_compacted_catch_up_agrees_with_the_whole_log() {
    let mut rng = Lcg(7);
    for round in 0..200 {
        let len = 1 + rng.below(60);
        let objects = 1 + rng.below(12);
        let entries = history(&mut rng, len, objects);
        let base = rng.below(len) as usize;
        let mine = PgLog::new(Version::ZERO, entries[..base].to_vec());
        let gap = &entries[base..];
        // Objects as the member's store holds them: at its own history
        // (none newer than its log's head).
        let mut store: HashMap<String, Version> = HashMap::new();
        for e in &entries[..base] {
            match e.op {
                LogOp::Modify => store.insert(e.oid.clone(), e.version),
                LogOp::Delete => store.remove(&e.oid),
            };
        }
        let local = |oid: &str| store.get(oid).copied();
        let head = entries.last().unwrap().version;
        let whole = merge(&mine, &Missing::new(), Version::ZERO, head, &entries, local).unwrap();
        let sent = compact(gap.iter(), mine.head());
        let appended = append_after_head(&mine, &Missing::new(), &sent, local).unwrap();
        assert_eq!(appended.missing, whole.missing, "round {round}");
        assert_eq!(appended.remove, whole.remove, "round {round}");
        // The whole log compacted, merged: the same again.
        let all = compact(entries.iter(), Version::ZERO);
        let merged = merge(&mine, &Missing::new(), Version::ZERO, head, &all, local).unwrap();
        assert_eq!(merged.missing, whole.missing, "round {round}");
        assert_eq!(merged.remove, whole.remove, "round {round}");
        assert_eq!(merged.divergent, 0, "round {round}");
        // The caught-up log holds every version and request id.
        let mut caught = mine.clone();
        for e in sent {
            caught.append(e);
        }
        assert_eq!(caught.weight(), entries.len(), "round {round}");
        assert_eq!(merged.log.weight(), entries.len(), "round {round}");
        for e in &entries {
            assert_eq!(caught.find_reqid(&e.reqid.unwrap()), Some(e.version));
            assert_eq!(merged.log.find_reqid(&e.reqid.unwrap()), Some(e.version));
        }
    }
}

#[test]
fn a_compacted_authority_tells_history_from_divergence() {
    // The history: a@1 b@2 a@3 c@4 a@5. This member holds a@1 b@2 a@3
    // whole, then a divergent write of b; the authority's log is
    // compacted (a@5 stands for a@1 and a@3, b@2 for itself).
    let history = vec![
        modify(v(1, 1), Version::ZERO, "a"),
        modify(v(1, 2), Version::ZERO, "b"),
        modify(v(1, 3), v(1, 1), "a"),
        modify(v(2, 4), Version::ZERO, "c"),
        modify(v(2, 5), v(1, 3), "a"),
    ];
    let mut mine = history[..3].to_vec();
    mine.push(modify(v(1, 4), v(1, 2), "b")); // divergent
    let mine = PgLog::new(Version::ZERO, mine);
    let auth = compact(history.iter(), Version::ZERO);
    let local = |oid: &str| match oid {
        "a" => Some(v(1, 3)),
        "b" => Some(v(1, 4)),
        _ => None,
    };
    let whole = merge(
        &mine,
        &Missing::new(),
        Version::ZERO,
        v(2, 5),
        &history,
        local,
    )
    .unwrap();
    let merged = merge(&mine, &Missing::new(), Version::ZERO, v(2, 5), &auth, local).unwrap();
    // Only the write of b at 1.4 diverges: a@1 and a@3, folded in the
    // authority's a@5, are history.
    assert_eq!(merged.divergent, 1);
    assert_eq!(whole.divergent, 1);
    assert_eq!(merged.missing, whole.missing);
    assert_eq!(merged.remove, whole.remove);
    assert_eq!(
        merged.missing,
        Missing::from([
            ("a".into(), v(2, 5)),
            ("b".into(), v(1, 2)),
            ("c".into(), v(2, 4)),
        ])
    );
    // What it kept of its own is not taken again from the folded list.
    assert_eq!(merged.log.weight(), history.len());
    // A compacted entry of ours may be history only in part: a@5 standing
    // for a@1 and a@3, where the authority holds a@3 but not a@5.
    let ours = compact(history.iter(), Version::ZERO);
    let mine = PgLog::new(Version::ZERO, ours);
    let auth = vec![
        history[0].clone(),
        history[1].clone(),
        history[2].clone(),
        modify(v(3, 4), Version::ZERO, "d"),
    ];
    let local = |oid: &str| match oid {
        "a" => Some(v(2, 5)),
        "b" => Some(v(1, 2)),
        "c" => Some(v(2, 4)),
        _ => None,
    };
    let merged = merge(&mine, &Missing::new(), Version::ZERO, v(3, 4), &auth, local).unwrap();
    // c@4 and a@5 diverge: a goes back to 1.3, c away.
    assert_eq!(merged.divergent, 2);
    assert_eq!(
        merged.missing,
        Missing::from([("a".into(), v(1, 3)), ("d".into(), v(3, 4))])
    );
    assert_eq!(merged.remove, vec!["c".to_string()]);
    // The log keeps a@3 (standing for a@1) and b@2, then takes d@4.
    let versions: Vec<Version> = merged.log.entries().map(|e| e.version).collect();
    assert_eq!(versions, vec![v(1, 2), v(1, 3), v(3, 4)]);
    assert_eq!(merged.log.weight(), 4);
    assert_eq!(
        merged.log.find_reqid(&ReqId { client: 1, tid: 1 }),
        Some(v(1, 1))
    );
    assert_eq!(merged.log.find_reqid(&ReqId { client: 1, tid: 5 }), None);

    // A folded version held for another object is a conflict.
    let auth = compact(history.iter(), Version::ZERO);
    let mut wrong = auth.clone();
    assert_eq!(wrong[0].oid, "b");
    wrong.remove(0);
    wrong[1].superseded[0].version = v(1, 2); // "a" claims b's version
    wrong[1].superseded.sort_by_key(|s| s.version);
    assert!(matches!(
        merge(
            &mine,
            &Missing::new(),
            Version::ZERO,
            v(2, 5),
            &wrong,
            local
        ),
        Err(MergeError::Conflict { .. })
    ));
}

#[test]
fn folded_versions_out_of_place_are_refused() {
    let mine = PgLog::new(Version::ZERO, vec![modify(v(1, 1), Version::ZERO, "a")]);
    // Folded at or after its own entry.
    let mut late = modify(v(1, 3), v(1, 1), "a");
    late.superseded = folded(&[v(1, 4)]);
    assert!(matches!(
        append_after_head(&mine, &Missing::new(), &[late], |_| None),
        Err(MergeError::Unordered { .. })
    ));
    // Folded at or before the member's head: history it holds already.
    let mut early = modify(v(1, 3), v(1, 1), "a");
    early.superseded = folded(&[v(1, 1), v(1, 2)]);
    assert!(matches!(
        append_after_head(&mine, &Missing::new(), &[early], |_| None),
        Err(MergeError::Unordered { .. })
    ));
    // The same in a whole-log merge.
    let mut late = modify(v(1, 3), v(1, 1), "a");
    late.superseded = folded(&[v(1, 2), v(1, 2)]);
    assert!(matches!(
        merge(
            &mine,
            &Missing::new(),
            Version::ZERO,
            v(1, 3),
            &[late],
            |_| None
        ),
        Err(MergeError::Unordered { .. })
    ));
}

#[test]
fn trimming_by_weight_drops_a_compacted_entry_whole_and_only_when_enough_follows() {
    let mut entries = vec![modify(v(1, 4), Version::ZERO, "a")];
    entries[0].superseded = folded(&[v(1, 1), v(1, 2), v(1, 3)]);
    let mut log = PgLog::new(Version::ZERO, entries);
    for i in 5..=7 {
        log.append(modify(v(1, i), Version::ZERO, "b"));
    }
    assert_eq!(log.weight(), 7);
    assert_eq!(log.trim_point(7), None);
    // Dropping it would leave less than asked: it stays.
    assert_eq!(log.trim_point(6), None);
    assert_eq!(log.trim_point(3), Some(v(1, 4)));
    assert_eq!(log.trim_to_weight(3), Some(v(1, 4)));
    assert_eq!((log.len(), log.weight(), log.tail()), (3, 3, v(1, 4)));
    assert_eq!(log.find_reqid(&ReqId { client: 1, tid: 2 }), None);
    assert_eq!(log.find_reqid(&ReqId { client: 1, tid: 6 }), Some(v(1, 6)));
}

#[test]
fn trimming_never_takes_a_caught_up_objects_newest_writes() {
    // Thirty writes, then a catch-up of one hot object standing for 33
    // (the newest of them at 1.63), then one more write: over a limit
    // of 30, the old writes go and the hot object's stay findable.
    let mut log = PgLog::new(Version::ZERO, Vec::new());
    for i in 1..=30 {
        log.append(modify(v(1, i), Version::ZERO, "old"));
    }
    let mut hot = modify(v(1, 63), Version::ZERO, "x");
    hot.superseded = folded(&(31..=62).map(|i| v(1, i)).collect::<Vec<_>>());
    log.append(hot);
    log.append(modify(v(1, 64), Version::ZERO, "y"));
    assert_eq!(log.weight(), 64);
    assert_eq!(log.trim_to_weight(29), Some(v(1, 30)));
    assert_eq!(log.weight(), 34);
    for tid in [62, 63, 64] {
        assert_eq!(
            log.find_reqid(&ReqId { client: 1, tid }),
            Some(v(1, tid)),
            "tid {tid}"
        );
    }
}

#[test]
fn a_shared_change_folded_below_our_tail_merges_without_panic() {
    // Our tail is 1.10; our only entry x@1.13 folds 1.5 (trimmed history).
    // The authority holds 1.5 but not 1.13 (ours diverged).
    let mut x = modify(v(1, 13), Version::ZERO, "x");
    x.superseded = folded(&[v(1, 5)]);
    let mine = PgLog::with_head(v(1, 10), v(1, 13), vec![x]);
    let auth = vec![
        modify(v(1, 5), Version::ZERO, "x"),
        modify(v(2, 11), Version::ZERO, "z"),
    ];
    let merged = merge(&mine, &Missing::new(), v(1, 4), v(2, 11), &auth, |_| None).expect("merges");
    assert_eq!(merged.divergent, 1);
    assert!(merged.log.entries().all(|e| e.version > v(1, 10)));
    assert_eq!(merged.missing.get("z"), Some(&v(2, 11)));
}

#[test]
fn a_version_held_twice_is_refused() {
    let mine = PgLog::new(Version::ZERO, vec![modify(v(1, 1), Version::ZERO, "a")]);
    let mut x = modify(v(1, 3), Version::ZERO, "x");
    x.superseded = folded(&[v(1, 2)]);
    let twice = vec![modify(v(1, 2), Version::ZERO, "y"), x];
    assert!(matches!(
        append_after_head(&mine, &Missing::new(), &twice, |_| None),
        Err(MergeError::Duplicate { .. })
    ));
    assert!(matches!(
        merge(
            &mine,
            &Missing::new(),
            Version::ZERO,
            v(1, 3),
            &twice,
            |_| None
        ),
        Err(MergeError::Duplicate { .. })
    ));
}

#[test]
fn merging_compacted_logs_agrees_with_merging_whole_ones() {
    // A shared history, then this member's divergent changes (never in
    // the authority's) and the authority's own; either log may come
    // compacted, and a compacted entry of ours may span the divergence.
    let mut rng = Lcg(11);
    for round in 0..300 {
        let objects = 1 + rng.below(8);
        let shared_len = rng.below(30);
        let mut at = HashMap::new();
        let shared = extend(&mut rng, &mut at, 1..=shared_len, |_| 1, objects);
        let mut theirs_at = at.clone();
        let n = rng.below(10);
        let ours = extend(
            &mut rng,
            &mut at,
            shared_len + 1..=shared_len + n,
            |_| 2,
            objects,
        );
        let m = rng.below(10);
        let theirs = extend(
            &mut rng,
            &mut theirs_at,
            shared_len + 1..=shared_len + m,
            |_| 3,
            objects,
        );
        let mine: Vec<LogEntry> = shared.iter().chain(&ours).cloned().collect();
        let auth: Vec<LogEntry> = shared.iter().chain(&theirs).cloned().collect();
        let head = auth.last().map_or(Version::ZERO, |e| e.version);
        // The member's store: at its own history, some objects already
        // at the authority's version.
        let mut store = at.clone();
        for (oid, version) in &theirs_at {
            if rng.below(3) == 0 {
                store.insert(oid.clone(), *version);
            }
        }
        let local = |oid: &str| store.get(oid).copied();
        let whole_mine = PgLog::new(Version::ZERO, mine.clone());
        let compact_mine = PgLog::new(Version::ZERO, compact(mine.iter(), Version::ZERO));
        let compact_auth = compact(auth.iter(), Version::ZERO);
        let expect = merge(
            &whole_mine,
            &Missing::new(),
            Version::ZERO,
            head,
            &auth,
            local,
        )
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(expect.divergent, ours.len(), "round {round}");
        for (what, log, auth) in [
            ("compacted ours", &compact_mine, &auth),
            ("compacted theirs", &whole_mine, &compact_auth),
            ("both compacted", &compact_mine, &compact_auth),
        ] {
            let got = merge(log, &Missing::new(), Version::ZERO, head, auth, local)
                .unwrap_or_else(|e| panic!("round {round}, {what}: {e}"));
            assert_eq!(got.missing, expect.missing, "round {round}, {what}");
            assert_eq!(got.remove, expect.remove, "round {round}, {what}");
            assert_eq!(got.divergent, ours.len(), "round {round}, {what}");
            assert_eq!(got.log.head(), expect.log.head(), "round {round}, {what}");
            assert_eq!(got.log.weight(), auth_weight(auth), "round {round}, {what}");
            for e in &auth_changes(auth) {
                assert_eq!(got.log.find_reqid(e), expect.log.find_reqid(e));
            }
        }
    }
}

/// The history's entries `auth` stands for.
fn auth_weight(auth: &[LogEntry]) -> usize {
    auth.iter().map(|e| 1 + e.superseded.len()).sum()
}

/// The request ids of every change `auth` stands for.
fn auth_changes(auth: &[LogEntry]) -> Vec<ReqId> {
    auth.iter()
        .flat_map(|e| e.superseded.iter().filter_map(|s| s.reqid).chain(e.reqid))
        .collect()
}
