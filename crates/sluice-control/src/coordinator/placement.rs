//! Placing maintainers: the info writes (each a compare-and-swap on the info key's revision),
//! the choice of a node and the epoch bump that precedes every placement and every close.
//!
//! Invariant: every placement and every close gets an epoch no maintainer ever had.

use super::*;

impl Coordinator {
    pub(super) fn set_info(
        &mut self,
        cf: &ChangefeedId,
        info: ChangefeedInfo,
        out: &mut Vec<Effect>,
    ) {
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        let rev = f.info_rev;
        f.info = info.clone();
        f.meta_busy = true;
        f.info_unsaved = true;
        let value = serde_json::to_vec(&info).unwrap_or_default();
        self.txn(
            out,
            Pending::SaveInfo(cf.clone(), Box::new(info)),
            vec![Compare::ModRevision {
                key: keys::info(cf.as_str()),
                rev,
            }],
            vec![(keys::info(cf.as_str()), value)],
            vec![],
        );
    }

    /// Bump the epoch, then place the maintainer (on `to`, or the least loaded node).
    pub(super) fn place(
        &mut self,
        _now: Millis,
        alive: &BTreeMap<NodeId, u64>,
        cf: &ChangefeedId,
        to: Option<NodeId>,
        out: &mut Vec<Effect>,
    ) {
        let load: BTreeMap<NodeId, usize> = alive
            .keys()
            .map(|n| (n.clone(), self.feeds.values().filter(|f| matches!(&f.placement, Placement::Running{node,..}|Placement::Added{node,..} if node == n)).count()))
            .collect();
        let Some(f) = self.feeds.get(cf) else { return };
        if f.meta_busy {
            return;
        }
        let usable = |n: &NodeId| alive.contains_key(n) && !self.cordoned.contains_key(n);
        let node = to
            .filter(|n| alive.contains_key(n))
            .or_else(|| {
                f.info
                    .config
                    .preferred_node
                    .clone()
                    .filter(|n| usable(n) && f.info.epoch == 0)
            })
            .or_else(|| {
                load.iter()
                    .filter(|(n, _)| usable(n))
                    .min_by_key(|(n, c)| (**c, (*n).clone()))
                    .map(|(n, _)| n.clone())
            })
            .or_else(|| alive.keys().next().cloned());
        let Some(node) = node else { return };
        self.bump(
            cf,
            Placement::Bumping {
                node,
                purpose: BumpPurpose::Place,
            },
            out,
        );
    }

    pub(super) fn bump(&mut self, cf: &ChangefeedId, placement: Placement, out: &mut Vec<Effect>) {
        let Some(f) = self.feeds.get_mut(cf) else {
            return;
        };
        #[allow(unused_mut)]
        let mut epoch = f.info.epoch + 1;
        #[cfg(feature = "mutations")]
        if crate::mutations::on("epoch-no-bump") && f.info.epoch > 0 {
            epoch = f.info.epoch;
        }
        let mut info = f.info.clone();
        info.epoch = epoch;
        let rev = f.info_rev;
        f.placement = placement;
        f.meta_busy = true;
        let value = serde_json::to_vec(&info).unwrap_or_default();
        self.txn(
            out,
            Pending::Bump(cf.clone(), epoch),
            vec![Compare::ModRevision {
                key: keys::info(cf.as_str()),
                rev,
            }],
            vec![(keys::info(cf.as_str()), value)],
            vec![],
        );
    }
}
