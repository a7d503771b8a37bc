//! One input record as the publisher reads it: a publication (its channel, from the key or the
//! channel header, and its data, the value as JSON) or a record to skip, and why. Pure.
//!
//! What is checked here needs no channel state: the channel id, its namespace against the
//! topic's, the value being JSON, its size against the namespace's `max_data_bytes` and the
//! model's rules. The state's size (`max_state_bytes`) and the channel limit are checked when a
//! transaction takes the record ([`super::queue`]), against the committed heads.

use shared::model::Data;
use shared::namespaces::Namespaces;
use shared::ChannelId;

/// Why an input record is skipped (its offset is committed all the same, so it is not read again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// No key (or no channel header), or one that is not a channel id.
    NotAChannel(String),
    /// The channel's namespace is not the topic's.
    WrongNamespace { channel: String, topic_namespace: String },
    /// The value is missing (a tombstone) or not JSON.
    NotJson(String),
    /// The data is larger than the namespace's `max_data_bytes`.
    TooLarge { size: usize, limit: usize },
    /// The channel's model refuses the data, or the state after it would pass `max_state_bytes`.
    Refused(String),
    /// A new channel past `MAX_CHANNELS`.
    ChannelLimit { limit: usize },
}

impl Skip {
    /// Its name in `/health` and the metric's `reason` label.
    pub fn reason(&self) -> &'static str {
        match self {
            Skip::NotAChannel(_) => "not_a_channel",
            Skip::WrongNamespace { .. } => "wrong_namespace",
            Skip::NotJson(_) => "not_json",
            Skip::TooLarge { .. } => "too_large",
            Skip::Refused(_) => "refused",
            Skip::ChannelLimit { .. } => "channel_limit",
        }
    }

    /// Every reason, in the order `/health` lists them.
    pub const REASONS: [&'static str; 6] = ["not_a_channel", "wrong_namespace", "not_json", "too_large", "refused", "channel_limit"];
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::NotAChannel(why) => write!(f, "not a channel id: {why}"),
            Skip::WrongNamespace { channel, topic_namespace } if topic_namespace.is_empty() => {
                write!(f, "channel {channel} is not in the default namespace, this topic's")
            }
            Skip::WrongNamespace { channel, topic_namespace } => write!(f, "channel {channel} is not in namespace {topic_namespace}, this topic's"),
            Skip::NotJson(why) => write!(f, "the value is not JSON: {why}"),
            Skip::TooLarge { size, limit } => write!(f, "the data is {size} bytes, more than the namespace's max_data_bytes ({limit})"),
            Skip::Refused(why) => write!(f, "refused by the channel's model: {why}"),
            Skip::ChannelLimit { limit } => write!(f, "a new channel past MAX_CHANNELS ({limit})"),
        }
    }
}

/// What an input record is.
#[derive(Debug, Clone)]
pub enum Parsed {
    /// A publication of `data` to `channel`, whose events live on partition `partition` of the
    /// events topic.
    Publish { channel: ChannelId, partition: i32, data: Box<Data> },
    Skip(Skip),
}

/// Reads a record of a topic whose namespace is `topic_namespace` (`""`: the default one):
/// `channel` is its key, or its channel header's value; `value` its value. `partitions`: the
/// events topic's partition count.
pub fn parse(topic_namespace: &str, channel: Option<&[u8]>, value: Option<&[u8]>, namespaces: &Namespaces, partitions: u32) -> Parsed {
    match parse_inner(topic_namespace, channel, value, namespaces, partitions) {
        Ok(p) => p,
        Err(skip) => Parsed::Skip(skip),
    }
}

fn parse_inner(topic_namespace: &str, channel: Option<&[u8]>, value: Option<&[u8]>, namespaces: &Namespaces, partitions: u32) -> Result<Parsed, Skip> {
    let raw = channel.ok_or_else(|| Skip::NotAChannel("the record has none".into()))?;
    let text = std::str::from_utf8(raw).map_err(|_| Skip::NotAChannel("not UTF-8".into()))?;
    let id = ChannelId::parse(text).map_err(|e| Skip::NotAChannel(format!("{text:?}: {e}")))?;
    if id.namespace().unwrap_or("") != topic_namespace {
        return Err(Skip::WrongNamespace { channel: id.to_string(), topic_namespace: topic_namespace.to_owned() });
    }
    // The topic's namespace is checked against the namespaces at start; one read back under
    // another configuration is refused like any other model refusal.
    let ns = namespaces.of(&id).map_err(|e| Skip::Refused(e.to_string()))?;
    let value = value.ok_or_else(|| Skip::NotJson("the record has no value".into()))?;
    let text = std::str::from_utf8(value).map_err(|_| Skip::NotJson("not UTF-8".into()))?;
    let data: Box<Data> = serde_json::from_str(text).map_err(|e| Skip::NotJson(e.to_string()))?;
    let size = data.get().len();
    if size > ns.max_data_bytes {
        return Err(Skip::TooLarge { size, limit: ns.max_data_bytes });
    }
    ns.model.validate(&data).map_err(|e| Skip::Refused(e.to_string()))?;
    let partition = shared::partitioner::partition_for(id.as_str().as_bytes(), partitions.max(1)) as i32;
    Ok(Parsed::Publish { channel: id, partition, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML: &str = "[namespaces.scores]\nmodel = \"json\"\nmax_data_bytes = 64\n\n[namespaces.chat]\nmodel = \"stream\"\n\n[namespaces.canvas]\nmodel = \"pixels\"\n";

    /// (topic's namespace, key, value) → the channel, or the skip's reason.
    #[test]
    fn parse_table() {
        let spaces = Namespaces::from_toml(TOML, shared::CanvasDims { width: 8, height: 8 }).unwrap();
        let big = format!("{{\"text\":\"{}\"}}", "x".repeat(100));
        let cases: Vec<(&str, Option<&str>, Option<&str>, Result<&str, &str>)> = vec![
            ("scores", Some("scores:game-1"), Some(r#"{"home":1}"#), Ok("scores:game-1")),
            ("chat", Some("chat:lobby"), Some(r#""hello""#), Ok("chat:lobby")),
            ("", Some("plain"), Some(r##"{"x":1,"y":2,"color":"#ff0000"}"##), Ok("plain")),
            ("scores", None, Some("{}"), Err("not_a_channel")),
            ("scores", Some("scores:has space"), Some("{}"), Err("not_a_channel")),
            ("scores", Some("a:b:c"), Some("{}"), Err("not_a_channel")),
            ("scores", Some("chat:lobby"), Some("{}"), Err("wrong_namespace")),
            ("scores", Some("game-1"), Some("{}"), Err("wrong_namespace")),
            ("", Some("scores:game-1"), Some("{}"), Err("wrong_namespace")),
            ("scores", Some("scores:g"), None, Err("not_json")),
            ("scores", Some("scores:g"), Some("{not json"), Err("not_json")),
            ("scores", Some("scores:g"), Some(""), Err("not_json")),
            ("chat", Some("chat:lobby"), Some(r#"{"a":1} trailing"#), Err("not_json")),
            ("scores", Some("scores:g"), Some(&big), Err("too_large")),
            ("canvas", Some("canvas:c1"), Some(r##"{"x":99,"y":0,"color":"#ff0000"}"##), Err("refused")),
        ];
        for (ns, key, value, want) in cases {
            let got = parse(ns, key.map(str::as_bytes), value.map(str::as_bytes), &spaces, 6);
            match (got, want) {
                (Parsed::Publish { channel, partition, data }, Ok(c)) => {
                    assert_eq!(channel.as_str(), c, "{key:?}");
                    assert_eq!(partition, shared::partitioner::partition_for(c.as_bytes(), 6) as i32, "{key:?}: the channel's partition");
                    assert_eq!(data.get(), value.unwrap(), "{key:?}: the value is the data, as it was written");
                }
                (Parsed::Skip(s), Err(reason)) => assert_eq!(s.reason(), reason, "{key:?} {value:?}: {s}"),
                (got, want) => panic!("{key:?} {value:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
