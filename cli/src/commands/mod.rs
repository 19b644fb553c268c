//! One module per command; [`run`] dispatches.

pub mod completion;
pub mod history;
pub mod lifecycle;
pub mod logs;
pub mod migrate;
pub mod node;
pub mod package;
pub mod plan;
pub mod record;
pub mod reset;
pub mod rollback;
pub mod version;
pub mod why;

use crate::args::{Cli, Command, DpCommand, NodeCommand, PackageCommand};
use crate::context::Ctx;
use crate::error::Result;

/// Runs the command of `cli`.
pub async fn run(cli: Cli) -> Result<()> {
    let ctx = Ctx::new(cli.global)?;
    match cli.command {
        Command::Version(a) => version::run(&ctx, &a).await,
        Command::Pause(a) => lifecycle::run(&ctx, lifecycle::Verb::Pause, &a).await,
        Command::Resume(a) => lifecycle::run(&ctx, lifecycle::Verb::Resume, &a).await,
        Command::Disable(a) => lifecycle::run(&ctx, lifecycle::Verb::Disable, &a).await,
        Command::Enable(a) => lifecycle::run(&ctx, lifecycle::Verb::Enable, &a).await,
        Command::Reset(a) => reset::run(&ctx, &a).await,
        Command::DeploymentPolicy(DpCommand::Reset(a)) => reset::run_dp(&ctx, &a).await,
        Command::Node(NodeCommand::List(a)) => node::list(&ctx, &a).await,
        Command::Node(NodeCommand::Status(a)) => node::status(&ctx, &a).await,
        Command::Node(NodeCommand::Reset(a)) => node::reset(&ctx, &a).await,
        Command::Node(NodeCommand::Ignore(a)) => node::ignore(&ctx, &a, true).await,
        Command::Node(NodeCommand::Unignore(a)) => node::ignore(&ctx, &a, false).await,
        Command::Node(NodeCommand::UpdateState(a)) => record::update_state(&ctx, &a).await,
        Command::Package(PackageCommand::Status(a)) => package::status(&ctx, &a).await,
        Command::Package(PackageCommand::Rerun(a)) => package::rerun(&ctx, &a).await,
        Command::Package(PackageCommand::Reset(a)) => package::reset(&ctx, &a).await,
        Command::Package(PackageCommand::Logs(a)) => logs::run(&ctx, &a).await,
        Command::Plan(a) => plan::run(&ctx, &a).await,
        Command::Why(a) => why::run(&ctx, &a).await,
        Command::History(a) => history::run(&ctx, &a).await,
        Command::Rollback(a) => rollback::run(&ctx, &a).await,
        Command::MigrateFromSkyhook(a) => migrate::run(&ctx, &a).await,
        Command::Completion(a) => completion::run(&a),
    }
}
