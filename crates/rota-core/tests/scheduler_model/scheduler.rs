//! A scheduler: it reads every RotaNode and Lease, decides on what it read, and acts on that
//! decision later, however much changed meanwhile.
//!
//! - **Grant** of slot `i` to node `n`, one of the grants rota-core's `schedule` makes on the
//!   read, among the nodes read queued without a grant and named by no Lease: (1)
//!   compare-and-swap Lease `i` from free to `n`; (2) compare-and-swap `n`'s RotaNode to
//!   `spec.grant = i`. A node that a Lease names is no waiter: that Lease is its grant, or is
//!   reclaimed before the node is granted again.
//! - **Withdrawal** of Lease `i`, read naming node `n` while `n` was read other than in a
//!   window of `i`: (1) compare-and-swap `n`'s RotaNode, removing the grant if it was `i` and
//!   the node queued (a grant not taken up: its agent is dead or hangs), else only recording
//!   the withdrawal (a Lease whose grant was never written, was given up, or whose node is
//!   idle); (2) compare-and-swap Lease `i` from `n` to free. Step 1 is what makes it safe: it
//!   fails if the agent took the grant up since the read, and it makes a grant of `i` to `n`
//!   still under way fail at its step 2. Its write must change the object (the record of the
//!   withdrawal does), or the API server would keep the resourceVersion.
//!
//! Every compare-and-swap compares the resourceVersion of the read; a refused one ends the
//! operation, and the scheduler reads again. Its own write gives it the object's new version.
//!
//! One read decides one operation here, to keep the state small. A real scheduler makes
//! several from one read, one after another, the later ones on a read older than what the
//! earlier ones changed. That is still explored with the other scheduler: reading at the same
//! instant, it may decide any of the operations the read allows (any of `schedule`'s grants),
//! and carry it out after the first scheduler's.

use std::fmt;

use crate::cluster::{Lease, RotaNode};
use crate::system::{Flaw, Leaders, Rota, State};

/// Whether, and how far, a scheduler believes it leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// It reads and acts.
    Leading,
    /// Waits for the leader Lease.
    Standby,
    /// Lost the leader Lease but does not know it yet: it goes on with the operation it
    /// decided, and reads no more.
    Deposed,
    /// Dead, or it noticed it no longer leads.
    Stopped,
}

/// An operation decided on a read of node `node` and Lease `slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Op {
    pub kind: Kind,
    pub node: u8,
    pub slot: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Grant,
    /// `timeout`: of a grant not taken up.
    Withdraw {
        timeout: bool,
    },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Op { node, slot, .. } = self;
        match self.kind {
            Kind::Grant => write!(f, "granting slot {slot} to node {node}"),
            Kind::Withdraw { timeout: true } => {
                write!(f, "withdrawing node {node}'s grant of {slot}, not taken up")
            }
            Kind::Withdraw { timeout: false } => {
                write!(f, "withdrawing Lease {slot} from node {node}, not in use")
            }
        }
    }
}

/// An operation under way, and whether the reads it compares are still current.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Plan {
    pub op: Op,
    /// Its first step succeeded.
    pub started: bool,
    pub node_current: bool,
    pub lease_current: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Scheduler {
    pub role: Role,
    pub plan: Option<Plan>,
}

impl Scheduler {
    /// The write of node `node`'s RotaNode: the scheduler's read of it is no longer current,
    /// unless the scheduler wrote it (`own`). A read that no step left compares stays as it
    /// is, so that it splits no state.
    pub fn node_written(&mut self, node: u8, own: bool) {
        if let Some(plan) = &mut self.plan
            && plan.op.node == node
            && !(plan.started && plan.op.kind != Kind::Grant)
        {
            plan.node_current = own;
        }
    }

    /// Like [`Scheduler::node_written`], of Lease `slot`.
    pub fn lease_written(&mut self, slot: u8, own: bool) {
        if let Some(plan) = &mut self.plan
            && plan.op.slot == slot
            && !(plan.started && plan.op.kind == Kind::Grant)
        {
            plan.lease_current = own;
        }
    }
}

/// One action of a scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Reads every RotaNode and Lease, and decides this operation.
    Decide(Op),
    /// The operation's step 1 (`started` false) or step 2.
    Next {
        op: Op,
        started: bool,
    },
    Stop,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Decide(op) => write!(f, "reads, and decides on {op}"),
            Step::Next { op, started } => {
                write!(f, "takes step {} of {op}", 1 + u8::from(*started))
            }
            Step::Stop => f.write_str("stops"),
        }
    }
}

/// What scheduler `s` may do next, `decisions` being what a read now allows.
pub fn steps(model: &Rota, state: &State, s: usize, decisions: &[Op]) -> Vec<Step> {
    let scheduler = &state.schedulers[s];
    let mut steps = Vec::new();
    let stops = match model.leaders {
        Leaders::Both => {
            scheduler.role == Role::Leading && state.schedulers[1 - s].role == Role::Leading
        }
        Leaders::Failover => scheduler.role == Role::Deposed,
        Leaders::One => false,
    };
    if stops {
        steps.push(Step::Stop);
    }
    if let Some(plan) = scheduler.plan {
        steps.push(Step::Next {
            op: plan.op,
            started: plan.started,
        });
    } else if scheduler.role == Role::Leading {
        let timeouts = state.timeouts_left != Some(0);
        steps.extend(
            decisions
                .iter()
                .copied()
                .filter(|op| timeouts || op.kind != Kind::Withdraw { timeout: true })
                .map(Step::Decide),
        );
    }
    steps
}

/// Carries out `step`, scheduler `s`'s action.
pub fn carry_out(model: &Rota, state: &mut State, s: usize, step: Step) {
    let plan = match step {
        Step::Stop => {
            state.schedulers[s].role = Role::Stopped;
            None
        }
        Step::Decide(op) => {
            if op.kind == (Kind::Withdraw { timeout: true }) {
                state.timeouts_left = state.timeouts_left.map(|left| left - 1);
            }
            Some(Plan {
                op,
                started: false,
                node_current: true,
                lease_current: true,
            })
        }
        Step::Next { .. } => {
            let plan = state.schedulers[s].plan.expect("an operation under way");
            next(model, state, s, plan)
        }
    };
    state.schedulers[s].plan = plan;
}

/// The next step of `plan`, and the plan after it, if any.
fn next(model: &Rota, state: &mut State, s: usize, plan: Plan) -> Option<Plan> {
    let blind = model.flaw == Some(Flaw::BlindWithdrawal);
    let Op { node, slot, .. } = plan.op;
    match (plan.op.kind, plan.started) {
        (Kind::Grant, false) => {
            let taken = Lease { holder: Some(node) };
            cas_lease(state, s, plan, taken).then_some(Plan {
                started: true,
                lease_current: true,
                ..plan
            })
        }
        (Kind::Grant, true) => {
            let read = state.nodes[usize::from(node)];
            let granted = RotaNode {
                grant: Some(slot),
                ..read
            };
            cas_node(state, s, plan, granted);
            None
        }
        (Kind::Withdraw { .. }, false) if blind => {
            cas_lease(state, s, plan, Lease { holder: None });
            None
        }
        (Kind::Withdraw { timeout }, false) => {
            let read = state.nodes[usize::from(node)];
            let withdrawn = RotaNode {
                grant: if timeout { None } else { read.grant },
                ..read
            };
            cas_node(state, s, plan, withdrawn).then_some(Plan {
                started: true,
                node_current: true,
                ..plan
            })
        }
        (Kind::Withdraw { .. }, true) => {
            cas_lease(state, s, plan, Lease { holder: None });
            None
        }
    }
}

/// Scheduler `s`'s compare-and-swap of its plan's RotaNode to `object`: written if the read is
/// still current, whose object is then the one there now.
fn cas_node(state: &mut State, s: usize, plan: Plan, object: RotaNode) -> bool {
    if plan.node_current {
        state.write_node(plan.op.node, object, Some(s));
    }
    plan.node_current
}

/// Like [`cas_node`], of its plan's Lease.
fn cas_lease(state: &mut State, s: usize, plan: Plan, object: Lease) -> bool {
    if plan.lease_current {
        state.write_lease(plan.op.slot, object, Some(s));
    }
    plan.lease_current
}
