//! The changefeed lifecycle through the coordinator: create, pause (dispatchers closed, fenced by a
//! new epoch), update while paused (refused while running), resume from the checkpoint, remove.

mod common;

use sluice_control::config::{ChangefeedConfig, SchedulerConfig};
use sluice_control::coordinator::FeedState;
use sluice_control::io::UserRequest;
use sluice_sim::scenario;
use sluice_sim::world::Sim;
use sluice_types::ChangefeedId;

const FILE: &str = r#"
name = "lifecycle"
[world]
nodes = ["n1", "n2"]
sink = "mysql"
[[world.tables]]
id = 1
name = "a.t"
rows = 20
[[step]]
op = "create_changefeed"
[[step]]
op = "write"
table = 1
rows = 50
[[step]]
op = "settle"
"#;

fn config(uri: &str) -> ChangefeedConfig {
    ChangefeedConfig {
        sink_dispatchers: Vec::new(),
        snapshot: Default::default(),
        sink_uri: uri.into(),
        start_ts: 1,
        scheduler: SchedulerConfig::default(),
        preferred_node: None,
        filter: Default::default(),
    }
}

fn run_until(sim: &mut Sim, ms: u64, mut done: impl FnMut(&Sim) -> bool) -> bool {
    let end = sim.now + ms;
    while sim.now < end {
        if done(sim) {
            return true;
        }
        let next = sim.now + 100;
        sim.advance(next)
            .unwrap_or_else(|f| panic!("{}", f.message));
    }
    done(sim)
}

#[test]
fn pause_update_resume_remove() {
    let sc = scenario::parse_str("lifecycle.toml", FILE).unwrap_or_else(|e| panic!("{e}"));
    let mut sim = Sim::new(sc, 3);
    for i in 0..sim.sc.steps.len() {
        sim.run_step(i).unwrap_or_else(|f| panic!("{}", f.message));
    }
    let cf = ChangefeedId::new("cf");
    let before = sim.changefeed_info("cf").expect("created");
    assert_eq!(before.state, FeedState::Normal);
    let cp = sim.persisted_checkpoint();
    assert!(
        cp >= sim.upstream.head,
        "settled checkpoint {cp} below head {}",
        sim.upstream.head
    );

    // Update is refused while running.
    sim.user_request(UserRequest::UpdateChangefeed {
        cf: cf.clone(),
        config: config("model://other"),
    });
    run_until(&mut sim, 1000, |_| false);
    assert_eq!(
        sim.changefeed_info("cf").map(|i| i.config.sink_uri),
        Some(before.config.sink_uri.clone())
    );

    // Pause: state recorded, epoch bumped (the close is fenced), checkpoint kept.
    sim.user_request(UserRequest::PauseChangefeed { cf: cf.clone() });
    assert!(
        run_until(&mut sim, 20_000, |s| s
            .changefeed_info("cf")
            .map(|i| i.state == FeedState::Paused)
            .unwrap_or(false)),
        "not paused"
    );
    let paused = sim.changefeed_info("cf").expect("info");
    assert!(paused.epoch > before.epoch, "pause must bump the epoch");
    assert_eq!(
        sim.dispatcher_count(),
        0,
        "a paused changefeed runs no dispatcher"
    );
    assert!(sim.persisted_checkpoint() >= cp);

    // Update while paused keeps the start point.
    sim.user_request(UserRequest::UpdateChangefeed {
        cf: cf.clone(),
        config: config("model://other"),
    });
    assert!(run_until(&mut sim, 5000, |s| s
        .changefeed_info("cf")
        .map(|i| i.config.sink_uri == "model://other")
        .unwrap_or(false)));
    assert_eq!(
        sim.changefeed_info("cf").map(|i| i.config.start_ts),
        Some(before.config.start_ts)
    );

    // Writes while paused are picked up after resume from the checkpoint.
    sim.upstream.write(
        &mut sluice_sim::rng::Rng::new(9),
        sluice_types::TableId(1),
        30,
        3,
        2,
    );
    sim.checker.register(&sim.upstream);
    sim.user_request(UserRequest::ResumeChangefeed { cf: cf.clone() });
    sim.settle(60_000).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        sim.changefeed_info("cf").map(|i| i.state),
        Some(FeedState::Normal)
    );
    assert!(
        sim.dispatcher_count() > 1,
        "resumed changefeed has dispatchers again"
    );
    sim.checker
        .sink_matches_upstream(&sim.upstream, sim.persisted_checkpoint())
        .unwrap_or_else(|e| panic!("{e}"));

    // Remove: the info is gone.
    sim.user_request(UserRequest::RemoveChangefeed { cf });
    assert!(
        run_until(&mut sim, 20_000, |s| s.changefeed_info("cf").is_none()),
        "not removed"
    );
    assert!(sim.checker.ok(), "{:?}", sim.checker.violation);
}

/// A pause is recorded after its close. When that write does not get through (the store is
/// unreachable for a moment), the coordinator writes it again once it can: a successor must find
/// the changefeed paused, not running. (Before, the state lived only in the coordinator's memory
/// and a later coordinator failover resumed the changefeed.)
#[test]
fn a_pause_whose_record_fails_at_first_survives_a_coordinator_failover() {
    let tail = r#"
[[step]]
op = "partition"
groups = [["meta"]]
[[step]]
op = "run"
ms = 1500
[[step]]
op = "heal"
[[step]]
op = "run"
ms = 1000
[[step]]
op = "crash"
node = "n1"
[[step]]
op = "run"
ms = 8000
[[step]]
op = "restart"
node = "n1"
[[step]]
op = "run"
ms = 3000
"#;
    for seed in 0..5 {
        let text = format!("{FILE}{tail}");
        let sc = scenario::parse_str("lifecycle.toml", &text).unwrap_or_else(|e| panic!("{e}"));
        let mut sim = Sim::new(sc, seed);
        for i in 0..3 {
            sim.run_step(i).unwrap_or_else(|f| panic!("{}", f.message));
        }
        assert_eq!(sim.coordinator_node().as_deref(), Some("n1"));
        let cf = ChangefeedId::new("cf");
        let info = |sim: &Sim| sim.changefeed_info("cf").expect("changefeed");
        let epoch = info(&sim).epoch;
        sim.user_request(UserRequest::PauseChangefeed { cf });
        // The close begins (the epoch is bumped); the store goes away before it ends.
        let deadline = sim.now + 2_000;
        while info(&sim).epoch == epoch {
            assert!(sim.now < deadline, "seed {seed}: the pause did not start");
            let next = sim.now + 1;
            sim.advance(next)
                .unwrap_or_else(|f| panic!("{}", f.message));
        }
        for i in 3..sim.sc.steps.len() {
            sim.run_step(i)
                .unwrap_or_else(|f| panic!("seed {seed} step {i}: {}", f.message));
        }
        assert_ne!(sim.coordinator_node().as_deref(), Some("n1"), "seed {seed}");
        let after = info(&sim);
        assert_eq!(after.state, FeedState::Paused, "seed {seed}: {after:?}");
        assert_eq!(
            sim.dispatcher_count(),
            0,
            "seed {seed}: a paused changefeed runs"
        );
        assert!(sim.checker.ok(), "seed {seed}: {:?}", sim.checker.violation);
    }
}

/// The coordinator counts a maintainer's silence only while it runs itself: a stall of the
/// node's loop (the coordinator and the maintainer stalled together) does not make it take the
/// maintainer for lost and place it again (a 1 GiB transaction read in one piece did, every
/// 10 s, forever: issue 14). `mutations.rs` shows the epoch bump with the check switched off.
#[test]
fn a_stalled_node_keeps_its_maintainer() {
    let (before, after) = common::epoch_after_a_stall();
    assert_eq!(
        before, after,
        "the maintainer was placed again after the stall"
    );
}
