//! Whether a model's state graph has a cycle: what stateright's `eventually` needs to be
//! complete, since it judges only the runs that end and does not see cycles.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use stateright::Model;

/// On the current path, or done with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mark {
    OnPath,
    Done,
}

/// What a depth-first search of every reachable state found.
pub enum Search<A> {
    /// No cycle, among this many states.
    Acyclic(usize),
    /// A cycle: the actions from an initial state to a state, then back to it.
    Cycle(Vec<A>),
}

fn fingerprint<T: Hash>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

fn successors<M: Model>(model: &M, state: &M::State) -> Vec<(M::Action, M::State)>
where
    M::Action: Clone,
{
    let mut actions = Vec::new();
    model.actions(state, &mut actions);
    actions
        .into_iter()
        .filter_map(|action| Some((action.clone(), model.next_state(state, action)?)))
        .collect()
}

pub fn search<M: Model>(model: &M) -> Search<M::Action>
where
    M::State: Hash,
    M::Action: Clone,
{
    let mut marks: HashMap<u64, Mark> = HashMap::new();
    for init in model.init_states() {
        let fp = fingerprint(&init);
        if marks.contains_key(&fp) {
            continue;
        }
        marks.insert(fp, Mark::OnPath);
        // The path: each state's fingerprint, the action that reached it, the successors
        // left to visit.
        let mut path = vec![(fp, None, successors(model, &init))];
        while let Some((fp, _, left)) = path.last_mut() {
            let Some((action, next)) = left.pop() else {
                marks.insert(*fp, Mark::Done);
                path.pop();
                continue;
            };
            let next_fp = fingerprint(&next);
            match marks.get(&next_fp) {
                Some(Mark::Done) => {}
                Some(Mark::OnPath) => {
                    let mut actions: Vec<M::Action> =
                        path.iter().filter_map(|(_, via, _)| via.clone()).collect();
                    actions.push(action);
                    return Search::Cycle(actions);
                }
                None => {
                    marks.insert(next_fp, Mark::OnPath);
                    let left = successors(model, &next);
                    path.push((next_fp, Some(action), left));
                }
            }
        }
    }
    Search::Acyclic(marks.len())
}
