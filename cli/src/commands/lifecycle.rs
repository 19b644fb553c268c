//! `pause`, `resume`, `disable`, `enable`: the NodeWright annotations `nodewright.nvidia.com/pause`
//! and `/disable` (value `"true"`), set and removed with a merge patch.

use nodewright_shared::keys;
use serde_json::{Value, json};

use crate::args::Lifecycle;
use crate::cluster;
use crate::context::Ctx;
use crate::error::Result;
use crate::prompt::confirm;
use crate::writes::Writer;

/// Which lifecycle change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// Set the pause annotation.
    Pause,
    /// Remove it.
    Resume,
    /// Set the disable annotation.
    Disable,
    /// Remove it.
    Enable,
}

impl Verb {
    fn word(self) -> &'static str {
        match self {
            Verb::Pause => "pause",
            Verb::Resume => "resume",
            Verb::Disable => "disable",
            Verb::Enable => "enable",
        }
    }

    /// The annotation and whether the verb sets it.
    fn annotation(self) -> (&'static str, bool) {
        match self {
            Verb::Pause => (keys::PAUSE_ANNOTATION, true),
            Verb::Resume => (keys::PAUSE_ANNOTATION, false),
            Verb::Disable => (keys::DISABLE_ANNOTATION, true),
            Verb::Enable => (keys::DISABLE_ANNOTATION, false),
        }
    }

    /// The state the verb leads to.
    fn state(self) -> &'static str {
        match self {
            Verb::Pause => "paused",
            Verb::Resume => "not paused",
            Verb::Disable => "disabled",
            Verb::Enable => "not disabled",
        }
    }

    fn effect(self) -> &'static str {
        match self {
            Verb::Pause => "nothing new starts and its unfinished Jobs are suspended",
            Verb::Resume => "its rollout goes on where it stopped",
            Verb::Disable => "the operator skips it; later NodeWrights proceed without it",
            Verb::Enable => "the operator works on it again",
        }
    }
}

/// Runs one lifecycle command.
pub async fn run(ctx: &Ctx, verb: Verb, args: &Lifecycle) -> Result<()> {
    let name = &args.name;
    let nw = cluster::nodewright(ctx, name).await?;
    let (key, set) = verb.annotation();
    let is_set = nw
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .is_some_and(|v| v == "true");
    let mut writer = Writer::new(ctx);
    if is_set == set {
        writer.note(format!(
            "NodeWright {name} is already {}: nothing to change",
            verb.state()
        ));
        return writer.print(ctx.format());
    }
    if !ctx.dry_run() {
        confirm(
            args.confirm.yes,
            &format!("{} NodeWright {name}", verb.word()),
            &format!(
                "{} NodeWright {name} ({})?",
                capitalised(verb.word()),
                verb.effect()
            ),
        )?;
    }
    let value = if set {
        Value::from("true")
    } else {
        Value::Null
    };
    writer
        .patch_nodewright(
            name,
            &format!(
                "{} ({} annotation {key})",
                verb.word(),
                if set { "set" } else { "removed" }
            ),
            json!({"metadata": {"annotations": {key: value}}}),
        )
        .await?;
    writer.print(ctx.format())
}

fn capitalised(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map_or_else(String::new, |c| {
        c.to_uppercase().collect::<String>() + chars.as_str()
    })
}
