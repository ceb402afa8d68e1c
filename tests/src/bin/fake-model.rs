//! fake-model: runs the test suite's fake Responses server on 127.0.0.1 for
//! trying agentx by hand without a real provider. Prints its base URL.

use agentx_tests::fake_model::{FakeModel, Reply};

fn main() {
    let model = FakeModel::start();
    // `--tool CMD` scripts one shell call before the echo replies.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, command] = args.as_slice()
        && flag == "--tool"
    {
        model.push(Reply::ToolCall {
            name: "shell".into(),
            arguments: serde_json::json!({ "command": command }),
        });
    }
    println!("AGENTX_BASE_URL={}", model.base_url());
    loop {
        std::thread::park();
    }
}
