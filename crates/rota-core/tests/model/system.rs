//! The system the checker explores: `N` nodes, each a machine with its agent, and the store they
//! share; the actions are the agents' own, their crashes, and the machines' reboots.

use std::fmt;

use rota_core::NodeState;
use stateright::{Model, Property};

use crate::agent::{self, Agent, Does, Flaw, Pc, RebootProtocol};
use crate::host::Host;
use crate::properties;
use crate::store::Store;

/// The model's parameters.
#[derive(Clone, Debug)]
pub struct Rota {
    /// `N`, the nodes, each with one reboot request.
    pub nodes: u8,
    /// `K`, the slots.
    pub slots: u8,
    /// How often each agent may crash in one run.
    pub crashes: u8,
    pub protocol: RebootProtocol,
    pub flaw: Option<Flaw>,
}

impl Rota {
    /// `nodes` nodes sharing `slots` slots, whose agents may each crash twice, anywhere: also
    /// while recovering from the first crash.
    pub fn new(nodes: u8, slots: u8, protocol: RebootProtocol) -> Rota {
        Rota {
            nodes,
            slots,
            crashes: 2,
            protocol,
            flaw: None,
        }
    }

    pub fn with_flaw(self, flaw: Flaw) -> Rota {
        Rota {
            flaw: Some(flaw),
            ..self
        }
    }

    /// Carries out `does`, node `node`'s agent's action.
    fn carry_out(&self, state: &mut State, node: u8, does: Does) {
        let n = usize::from(node);
        let host = &mut state.hosts[n];
        let agent = &mut state.agents[n];
        agent.pc = match does {
            Does::Commit(event) => {
                let decision = state
                    .store
                    .record(node)
                    .lifecycle()
                    .apply(&event)
                    .unwrap_or_else(|e| panic!("node {node}: {e}"));
                // commit.rs uncordons before the write that asks for it.
                assert!(
                    !(decision.uncordon && host.cordoned),
                    "node {node}: {event} written while still cordoned"
                );
                let next = decision.next;
                state
                    .store
                    .transition(node, agent::transition(decision, &event, host));
                assert_eq!(
                    state.store.record(node).lifecycle(),
                    next,
                    "node {node}: the record after {event} is not the lifecycle the core decided"
                );
                if agent.pc == Pc::SpawnedUnrecorded {
                    Pc::Running
                } else {
                    Pc::Top
                }
            }
            Does::ReadSlot(slot) => Pc::Claim(slot),
            Does::TakeSlot(slot) => {
                if self.flaw == Some(Flaw::BlindSlotWrite) {
                    state.store.overwrite_slot(slot, node);
                } else {
                    state.store.take_slot(slot, node);
                }
                // Taken or not, the next action reads the slots again (`Acquire::Granted` for a
                // slot the node holds).
                Pc::Top
            }
            Does::Cordon => {
                host.cordoned = true;
                Pc::Cordoned
            }
            Does::Uncordon => {
                host.cordoned = false;
                Pc::Uncordoned
            }
            Does::WriteMarker => {
                host.marker = Some(host.boot);
                match self.protocol {
                    RebootProtocol::MarkerBeforeSpawn => Pc::Marked,
                    RebootProtocol::MarkerAfterCommand => Pc::Top,
                }
            }
            Does::Spawn if state.store.record(node).state() == NodeState::Maintaining => {
                Pc::SpawnedUnrecorded
            }
            Does::Spawn => Pc::Running,
            Does::CommandExits => {
                host.reboot_due = true;
                match self.protocol {
                    RebootProtocol::MarkerBeforeSpawn => Pc::Top,
                    RebootProtocol::MarkerAfterCommand => Pc::Exited,
                }
            }
            Does::Wait => Pc::Waiting,
        };
    }
}

impl fmt::Display for Rota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "N={} K={} crashes={} {:?}",
            self.nodes, self.slots, self.crashes, self.protocol
        )?;
        match self.flaw {
            Some(flaw) => write!(f, " with {flaw:?}"),
            None => Ok(()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub store: Store,
    /// Node `n`'s machine.
    pub hosts: Vec<Host>,
    /// Node `n`'s agent.
    pub agents: Vec<Agent>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// The node's agent takes its next action.
    Agent(u8, Does),
    /// The node's agent is killed and started again, with nothing of what it held in memory;
    /// its child, the reboot command, is killed with it (same cgroup). With `took_effect`,
    /// the command had already set the reboot going.
    Crash { node: u8, took_effect: bool },
    /// The node's machine reboots, which a reboot command in this boot set going: a new boot
    /// id, and the agent starts again.
    Reboot(u8),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Agent(node, does) => write!(f, "node {node}: {does}"),
            Action::Crash {
                node,
                took_effect: false,
            } => write!(f, "node {node}: the agent crashes and restarts"),
            Action::Crash {
                node,
                took_effect: true,
            } => write!(
                f,
                "node {node}: the agent crashes and restarts, after its reboot command took effect"
            ),
            Action::Reboot(node) => write!(f, "node {node}: the machine reboots"),
        }
    }
}

impl Model for Rota {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let agent = Agent {
            pc: Pc::Top,
            crashes: 0,
        };
        vec![State {
            store: Store::new(self.nodes, self.slots),
            hosts: vec![Host::new(); usize::from(self.nodes)],
            agents: vec![agent; usize::from(self.nodes)],
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for node in 0..self.nodes {
            let n = usize::from(node);
            let (host, agent) = (&state.hosts[n], &state.agents[n]);
            if let Some(does) =
                agent::next(self.protocol, self.flaw, &state.store, host, agent, node)
            {
                actions.push(Action::Agent(node, does));
            }
            // A crash between two handlers loses nothing: the restarted agent reads the same
            // record and takes the same action.
            if agent.pc != Pc::Top && agent.crashes < self.crashes {
                actions.push(Action::Crash {
                    node,
                    took_effect: false,
                });
                if agent.pc.child_running() && !host.reboot_due {
                    actions.push(Action::Crash {
                        node,
                        took_effect: true,
                    });
                }
            }
            if host.reboot_due || agent.pc.child_running() {
                actions.push(Action::Reboot(node));
            }
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        match action {
            Action::Agent(node, does) => self.carry_out(&mut next, node, does),
            Action::Crash { node, took_effect } => {
                let n = usize::from(node);
                next.agents[n].pc = Pc::Top;
                next.agents[n].crashes += 1;
                next.hosts[n].reboot_due |= took_effect;
            }
            Action::Reboot(node) => {
                let n = usize::from(node);
                next.hosts[n].reboot();
                next.agents[n].pc = Pc::Top;
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }
}
