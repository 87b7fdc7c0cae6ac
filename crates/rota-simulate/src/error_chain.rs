/// `e` followed by each of its sources, joined by `: `: the messages of the libraries used here
/// (reqwest's, the agent's) say only what failed, their sources say why.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(e) = source {
        message.push_str(": ");
        message.push_str(&e.to_string());
        source = e.source();
    }
    message
}
