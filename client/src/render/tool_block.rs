//! A finished tool call on a terminal, folded: one header line with the
//! command, its exit status and its size, then only the last lines of output.

use agentx_shared::proto::ToolResultEvent;

const GREEN: &str = "32";
const RED: &str = "31";
const DIM: &str = "2";

/// The folded block of `shown` (the call's label, `$ COMMAND` for the
/// shell: see `turn::folded_label`) and its `result`:
/// `$ cargo test  ✓ exit 0 · 12 lines`, then the last `tail` lines.
/// The command and output are made safe here; `styled` adds colour.
pub fn lines(shown: &str, result: &ToolResultEvent, tail: usize, styled: bool) -> Vec<String> {
    let paint = |sgr: &str, text: &str| {
        if styled {
            format!("\x1b[{sgr}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    };
    let command = crate::show::visible(shown);
    if !result.not_run.is_empty() {
        let why = crate::show::visible(&result.not_run);
        return vec![format!(
            "{command}  {}",
            paint(RED, &format!("✗ not run: {why}"))
        )];
    }
    let (ok, status) = if result.denied {
        (false, "declined".to_owned())
    } else if result.timed_out {
        (false, "timed out".to_owned())
    } else {
        match result.exit_code {
            Some(0) => (true, "exit 0".to_owned()),
            Some(code) => (false, format!("exit {code}")),
            None => (false, "killed".to_owned()),
        }
    };
    let mark = if ok {
        paint(GREEN, &format!("✓ {status}"))
    } else {
        paint(RED, &format!("✗ {status}"))
    };
    let output: Vec<&str> = result.output.lines().skip(1).collect();
    let size = agentx_shared::plural::count(output.len() as u64, "line");
    let mut out = vec![format!(
        "{command}  {mark} {}",
        paint(DIM, &format!("· {size}"))
    )];
    if result.denied {
        return out;
    }
    let from = output.len().saturating_sub(tail);
    if from > 0 {
        out.push(paint(
            DIM,
            &format!(
                "  … {}",
                agentx_shared::plural::count(from as u64, "earlier line")
            ),
        ));
    }
    for line in &output[from..] {
        let shown: String = crate::show::visible(line).chars().take(200).collect();
        out.push(format!("  {} {shown}", paint(DIM, "│")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(exit: Option<i32>, output: &str) -> ToolResultEvent {
        ToolResultEvent {
            exit_code: exit,
            output: output.to_owned(),
            ..ToolResultEvent::default()
        }
    }

    #[test]
    fn a_finished_command_is_one_header_and_its_last_lines() {
        let output = format!(
            "exit code 0\n{}",
            (1..=12).map(|n| format!("{n}\n")).collect::<String>()
        );
        assert_eq!(
            lines("$ seq 1 12", &result(Some(0), &output), 3, false),
            [
                "$ seq 1 12  ✓ exit 0 · 12 lines",
                "  … 9 earlier lines",
                "  │ 10",
                "  │ 11",
                "  │ 12"
            ]
        );
        assert_eq!(
            lines("$ false", &result(Some(1), "exit code 1\n"), 3, true),
            ["$ false  \x1b[31m✗ exit 1\x1b[0m \x1b[2m· 0 lines\x1b[0m"]
        );
    }

    #[test]
    fn declined_killed_and_not_run_say_so_and_output_is_made_safe() {
        let declined = ToolResultEvent {
            denied: true,
            output: "declined\n".into(),
            ..ToolResultEvent::default()
        };
        assert_eq!(
            lines("$ rm -rf x", &declined, 3, false),
            ["$ rm -rf x  ✗ declined · 0 lines"]
        );
        assert_eq!(
            lines(
                "$ sleep 9",
                &result(None, "killed\nz\x1b]52;c;aGk=\x07\n"),
                3,
                false
            ),
            ["$ sleep 9  ✗ killed · 1 line", "  │ z\\x1b]52;c;aGk=\\x07"]
        );
        let not_run = ToolResultEvent {
            not_run: "unknown tool \"python\"".into(),
            ..ToolResultEvent::default()
        };
        assert_eq!(
            lines("$ {}", &not_run, 3, false),
            ["$ {}  ✗ not run: unknown tool \"python\""]
        );
    }
}
