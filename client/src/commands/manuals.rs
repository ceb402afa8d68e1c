//! `agentx completions SHELL` and `agentx man`: the shell completion
//! scripts and the man page, made from the command tree.

use crate::error::{CliError, CliResult};
use crate::ui::print_all;

/// `agentx completions SHELL`.
pub fn completions(shell: clap_complete::Shell) -> CliResult<()> {
    use clap::CommandFactory as _;
    let mut command = crate::cli::Cli::command();
    // Made whole first: clap_complete panics when its writer fails.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "agentx", &mut script);
    print_all(&script, "the completion script")
}

/// `agentx man`: the man page in roff.
pub fn man() -> CliResult<()> {
    use clap::CommandFactory as _;
    let command = crate::cli::Cli::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut page)
        .map_err(|e| CliError::failed(format!("writing the man page: {e}")))?;
    print_all(&page, "the man page")
}
