//! Which node a client id is: the id itself is the node's name, or a file registers each
//! node's id (and, optionally, the address its requests come from). On Kubernetes, each
//! Node's machine id gives it (`rota-fleetlock`'s caller builds that map).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use async_trait::async_trait;
use rota_core::NodeName;

use crate::error::{Error, Result};

/// The node a client id maps to, and the address its requests must come from, if known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Client {
    pub node: NodeName,
    pub address: Option<IpAddr>,
}

#[async_trait]
pub trait Ids: Send + Sync {
    /// The client `id` is, or `None` when it maps to no node.
    async fn client(&self, id: &str) -> Result<Option<Client>>;
}

/// The id is the node's name (a host configured with `[identity] node_uuid`-free ids, or a
/// FleetLock client that sends its hostname).
pub struct NameIds;

#[async_trait]
impl Ids for NameIds {
    async fn client(&self, id: &str) -> Result<Option<Client>> {
        Ok(NodeName::new(id).ok().map(|node| Client {
            node,
            address: None,
        }))
    }
}

/// Ids registered in a file (`--ids`): one host per line, `<node> <id> [<address>]`; `#`
/// starts a comment. A host shows its Zincati id with
/// `systemd-id128 machine-id --app-specific=de35106b6ec24688b63afddaa156679b`.
#[derive(Debug)]
pub struct FileIds(HashMap<String, Client>);

impl FileIds {
    pub fn read(path: &Path) -> Result<FileIds> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Ids {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        FileIds::parse(&text).map_err(|reason| Error::Ids {
            path: path.display().to_string(),
            reason,
        })
    }

    pub fn parse(text: &str) -> Result<FileIds, String> {
        let mut ids = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let (node, id, address) = match words.as_slice() {
                [node, id] => (node, id, None),
                [node, id, address] => (node, id, Some(address)),
                _ => {
                    return Err(format!(
                        "line {}: {line:?} is not \"<node> <id> [<address>]\"",
                        n + 1
                    ));
                }
            };
            let node = NodeName::new(*node).map_err(|e| format!("line {}: {e}", n + 1))?;
            let address = address
                .map(|a| a.parse::<IpAddr>())
                .transpose()
                .map_err(|e| format!("line {}: address: {e}", n + 1))?;
            let client = Client { node, address };
            if ids.insert((*id).to_owned(), client).is_some() {
                return Err(format!("line {}: id {id} is registered twice", n + 1));
            }
        }
        Ok(FileIds(ids))
    }
}

#[async_trait]
impl Ids for FileIds {
    async fn client(&self, id: &str) -> Result<Option<Client>> {
        Ok(self.0.get(id).cloned())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
mod tests {
    use super::*;

    #[test]
    fn a_registry_reads_nodes_ids_and_addresses() {
        let ids = FileIds::parse(
            "# fleet\nfcos-1 975228d46dc94622b9bbe16671e2b58d 127.0.0.2\nfcos-2 abc # no address\n",
        )
        .unwrap();
        assert_eq!(
            ids.0.get("975228d46dc94622b9bbe16671e2b58d"),
            Some(&Client {
                node: NodeName::new("fcos-1").unwrap(),
                address: Some("127.0.0.2".parse().unwrap())
            })
        );
        assert_eq!(ids.0.get("abc").map(|c| c.address), Some(None));
    }

    #[test]
    fn a_bad_registry_names_its_line() {
        for (text, needle) in [
            ("fcos-1\n", "line 1"),
            ("fcos-1 a 300.0.0.1\n", "address"),
            ("bad/name a\n", "line 1"),
            ("a x\nb x\n", "twice"),
        ] {
            let error = FileIds::parse(text).unwrap_err();
            assert!(error.contains(needle), "{text:?}: {error}");
        }
    }
}
