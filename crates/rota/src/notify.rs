//! `rota agent --notify-*`: the notifier's configuration from the command line; rota-notify's
//! observer turns the agent's moments into notifications.

use anyhow::{Result, bail};
use rota_notify::{NotifierConfig, Templates};

use crate::cli::AgentArgs;

/// The notifier's configuration from the command line; `None` without any webhook.
pub fn config(args: &AgentArgs) -> Result<Option<NotifierConfig>> {
    let webhooks: Vec<_> = args
        .notify
        .notify_webhooks
        .iter()
        .chain(&args.notify.notify_slack)
        .cloned()
        .collect();
    if webhooks.is_empty() {
        if let Some((kind, _)) = args.notify.notify_templates.first() {
            bail!(
                "--notify-template {kind}=…: no webhook to send it to; add --notify-webhook URL \
                 or --notify-slack URL"
            );
        }
        return Ok(None);
    }
    let mut templates = Templates::default();
    let mut seen = Vec::new();
    for (kind, template) in &args.notify.notify_templates {
        if seen.contains(kind) {
            bail!("--notify-template {kind}={template}: a second template for {kind}; give one");
        }
        seen.push(*kind);
        templates.set(*kind, template.clone());
    }
    let mut config = NotifierConfig::new(webhooks);
    config.templates = templates;
    Ok(Some(config))
}
