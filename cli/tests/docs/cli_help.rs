//! The command-line page: `kerf --help` and the `--help` of every subcommand it lists, from
//! the built binary, run with an empty environment so that no variable of the test's own
//! shows up as a setting's current value.

use std::process::Command;

use super::reference::GENERATED;

fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(args)
        .arg("--help")
        .env_clear()
        .output()
        .unwrap();
    assert!(output.status.success(), "kerf {args:?} --help failed");
    String::from_utf8(output.stdout).unwrap()
}

pub fn page() -> String {
    let top = help(&[]);
    let mut out = format!(
        "{GENERATED}\n\n# Command line\n\n\
         Every command's `--help`. The controller's options are also environment variables \
         (`[env: NAME=]`): see [Controller settings](settings.md).\n\n\
         ## kerf\n\n```text\n{top}```\n"
    );
    let commands = top
        .split("Commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help");
    for name in commands {
        out.push_str(&format!(
            "\n## kerf {name}\n\n```text\n{}```\n",
            help(&[name])
        ));
    }
    out
}
