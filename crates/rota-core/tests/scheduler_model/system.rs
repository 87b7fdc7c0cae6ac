//! The system the checker explores: `N` nodes, each a RotaNode, a machine and an agent; `K`
//! Leases; two schedulers; and an operator who may write one grant by hand.

use std::fmt;

use stateright::{Model, Property};

use crate::agent::{self, Agent, Does, Pc};
use crate::cluster::{Host, Lease, RotaNode, Status};
use crate::decisions;
use crate::properties;
use crate::scheduler::{self, Role, Scheduler, Step};

/// How the two schedulers share the lead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leaders {
    /// Both believe they lead, all along: each reads and acts on its own reads, as a
    /// partitioned old leader does beside the new one. One may stop at any step; the other
    /// carries on.
    Both,
    /// One leads and the other stands by, until one failover at any step hands the lead
    /// over; the deposed leader may still carry out the operation it decided, but reads no
    /// more, and stops at any step.
    Failover,
    /// One leads, all along: the other never runs.
    One,
}

/// The groups of a model with two: node 0 and 1 in `a`, the others in `b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Groups {
    /// At most one node of each group out at once.
    OneEach,
    /// One group at a time.
    InTurn,
}

impl Groups {
    /// Node `node`'s group.
    pub fn of(node: u8) -> &'static str {
        if node < 2 { "a" } else { "b" }
    }

    /// The rules rota-core's `schedule` gets.
    pub fn limits(self, concurrency: u32) -> rota_core::Limits {
        rota_core::Limits {
            each_group: (self == Groups::OneEach).then_some(1),
            in_turn: self == Groups::InTurn,
            ..rota_core::Limits::fleet(concurrency)
        }
    }
}

/// A rule of the protocol broken on purpose, for the tests that show a property catching it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flaw {
    /// A withdrawal gives the Lease back without its compare-and-swap on the RotaNode, so it
    /// withdraws a grant already taken up.
    BlindWithdrawal,
    /// The agent disrupts its node once it took a grant up, without the fence on the Lease.
    Unfenced,
}

/// The model's parameters.
#[derive(Clone, Debug)]
pub struct Rota {
    /// `N`, the nodes, each queued for one turn.
    pub nodes: u8,
    /// `K`, the slots: the Leases `rota-slot-0..K-1`.
    pub slots: u8,
    /// How often each agent may crash in one run.
    pub crashes: u8,
    pub leaders: Leaders,
    /// How many grants not taken up the schedulers may withdraw in one run (the timeout
    /// passing before a live agent took its grant up); `None` for no limit.
    pub timeouts: Option<u8>,
    /// How many grants an operator may write by hand, each into a queued RotaNode whose
    /// Lease does not name the node.
    pub hand_grants: u8,
    pub flaw: Option<Flaw>,
    /// Two groups and their rule, if any.
    pub groups: Option<Groups>,
}

impl Rota {
    pub fn with_flaw(self, flaw: Flaw) -> Rota {
        Rota {
            flaw: Some(flaw),
            ..self
        }
    }
}

impl fmt::Display for Rota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let timeouts = match self.timeouts {
            Some(timeouts) => timeouts.to_string(),
            None => "any".to_owned(),
        };
        write!(
            f,
            "N={} K={} {:?} crashes={} timeouts={timeouts} hand grants={}",
            self.nodes, self.slots, self.leaders, self.crashes, self.hand_grants
        )?;
        if let Some(groups) = self.groups {
            write!(f, " groups {groups:?}")?;
        }
        match self.flaw {
            Some(flaw) => write!(f, " with {flaw:?}"),
            None => Ok(()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Node `n`'s RotaNode.
    pub nodes: Vec<RotaNode>,
    /// Lease `rota-slot-<i>`.
    pub leases: Vec<Lease>,
    /// Node `n`'s machine.
    pub hosts: Vec<Host>,
    /// Node `n`'s agent.
    pub agents: Vec<Agent>,
    /// Sorted: they run one program, so which is which does not matter, and sorting makes
    /// the two orders one state. The actions name a scheduler by what it does, not by index.
    pub schedulers: [Scheduler; 2],
    /// Withdrawals of grants not taken up left, if they are limited.
    pub timeouts_left: Option<u8>,
    pub hand_grants_left: u8,
}

impl State {
    /// Writes node `node`'s RotaNode: a new resourceVersion, so every read of it is no longer
    /// current, except that scheduler `writer`, if any, has the new version from its write's
    /// answer. A read is kept as whether it is still current, all that comparing its
    /// resourceVersion at a compare-and-swap decides: states that differ only in how many
    /// writes happened are one state to the checker, and withdrawals repeated without end
    /// still leave a finite state space.
    pub fn write_node(&mut self, node: u8, object: RotaNode, writer: Option<usize>) {
        let n = usize::from(node);
        self.nodes[n] = object;
        if let Pc::TakeUp { current, .. } = &mut self.agents[n].pc {
            *current = false;
        }
        for (s, scheduler) in self.schedulers.iter_mut().enumerate() {
            scheduler.node_written(node, writer == Some(s));
        }
    }

    /// Writes Lease `slot`, like [`State::write_node`].
    pub fn write_lease(&mut self, slot: u8, object: Lease, writer: Option<usize>) {
        let i = usize::from(slot);
        self.leases[i] = object;
        for (s, scheduler) in self.schedulers.iter_mut().enumerate() {
            scheduler.lease_written(slot, writer == Some(s));
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// The node's agent takes its next action.
    Agent(u8, Does),
    /// The node's agent is killed and started again, with nothing of what it held in memory.
    Crash(u8),
    /// The scheduler of this index in the state takes a step.
    Scheduler(usize, Step),
    /// The standby scheduler takes the leader Lease over; the leader, deposed, does not know.
    Failover,
    /// An operator writes a grant of `slot` into the queued RotaNode of `node`, which that
    /// Lease does not name.
    HandGrant { node: u8, slot: u8 },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Agent(node, does) => write!(f, "node {node}: the agent {does}"),
            Action::Crash(node) => write!(f, "node {node}: the agent crashes and restarts"),
            Action::Scheduler(_, step) => write!(f, "a scheduler {step}"),
            Action::Failover => f.write_str("the standby scheduler takes the lead"),
            Action::HandGrant { node, slot } => {
                write!(f, "an operator writes a grant of {slot} into node {node}")
            }
        }
    }
}

impl Model for Rota {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let (nodes, slots) = (usize::from(self.nodes), usize::from(self.slots));
        let queued = RotaNode {
            grant: None,
            status: Status::Queued,
        };
        let agent = Agent {
            pc: Pc::Top,
            crashes: 0,
        };
        let scheduler = |role| Scheduler { role, plan: None };
        let second = match self.leaders {
            Leaders::Both => Role::Leading,
            Leaders::Failover => Role::Standby,
            Leaders::One => Role::Stopped,
        };
        vec![State {
            nodes: vec![queued; nodes],
            leases: vec![Lease { holder: None }; slots],
            hosts: vec![Host::default(); nodes],
            agents: vec![agent; nodes],
            schedulers: [scheduler(Role::Leading), scheduler(second)],
            timeouts_left: self.timeouts,
            hand_grants_left: self.hand_grants,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for node in 0..self.nodes {
            if let Some(does) = agent::next(self.flaw, state, node) {
                actions.push(Action::Agent(node, does));
            }
            let agent = &state.agents[usize::from(node)];
            if agent.pc.crash_matters() && agent.crashes < self.crashes {
                actions.push(Action::Crash(node));
            }
        }
        let reads = state
            .schedulers
            .iter()
            .any(|s| s.role == Role::Leading && s.plan.is_none());
        let decisions = if reads {
            decisions::decisions(self, &state.nodes, &state.leases)
        } else {
            Vec::new()
        };
        for s in 0..state.schedulers.len() {
            let steps = scheduler::steps(self, state, s, &decisions);
            actions.extend(steps.into_iter().map(|step| Action::Scheduler(s, step)));
        }
        if state.schedulers.iter().any(|s| s.role == Role::Standby) {
            actions.push(Action::Failover);
        }
        if state.hand_grants_left > 0 {
            for (node, rota_node) in (0..self.nodes).zip(&state.nodes) {
                for (slot, lease) in (0..self.slots).zip(&state.leases) {
                    if rota_node.status == Status::Queued
                        && rota_node.grant.is_none()
                        && lease.holder != Some(node)
                    {
                        actions.push(Action::HandGrant { node, slot });
                    }
                }
            }
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        match action {
            Action::Agent(node, does) => agent::carry_out(&mut next, node, does),
            Action::Crash(node) => {
                let agent = &mut next.agents[usize::from(node)];
                agent.pc = Pc::Top;
                agent.crashes += 1;
            }
            Action::Scheduler(s, step) => scheduler::carry_out(self, &mut next, s, step),
            Action::Failover => {
                for scheduler in &mut next.schedulers {
                    scheduler.role = match scheduler.role {
                        Role::Leading => Role::Deposed,
                        Role::Standby => Role::Leading,
                        role => role,
                    };
                }
            }
            Action::HandGrant { node, slot } => {
                next.hand_grants_left -= 1;
                let granted = RotaNode {
                    grant: Some(slot),
                    ..state.nodes[usize::from(node)]
                };
                next.write_node(node, granted, None);
            }
        }
        next.schedulers.sort();
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all(self.leaders, self.groups)
    }
}
