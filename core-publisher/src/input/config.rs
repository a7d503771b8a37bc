//! The input's settings: which topics are read (`INPUT_TOPICS`, each with the namespace its
//! records publish to), where a record's channel comes from (its key, or `INPUT_CHANNEL_HEADER`),
//! the consumer group whose offsets the transactions commit (`INPUT_GROUP`), and where a group
//! with no committed offset starts (`INPUT_OFFSET_RESET`).

use shared::namespaces::Namespaces;

/// One input topic and the namespace its records publish to (`""`: the default namespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputTopic {
    pub topic: String,
    pub namespace: String,
}

/// Where a group with no committed offset for a partition starts reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    /// The partition's first record (what users of a connector expect: the topic's history
    /// becomes publications).
    Earliest,
    /// Records written after the publisher joined the group.
    Latest,
}

impl OffsetReset {
    /// librdkafka's `auto.offset.reset` value.
    pub fn as_str(self) -> &'static str {
        match self {
            OffsetReset::Earliest => "earliest",
            OffsetReset::Latest => "latest",
        }
    }
}

/// The input, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSettings {
    pub topics: Vec<InputTopic>,
    /// Take the channel from this record header instead of the key.
    pub channel_header: Option<String>,
    /// The consumer group (`group.id`) whose offsets the transactions commit.
    pub group: String,
    /// The group's `group.instance.id` (static membership, KIP-345): a restarted publisher takes
    /// the killed one's place in the group at once instead of waiting for its session to time out.
    pub instance: String,
    pub offset_reset: OffsetReset,
}

impl InputSettings {
    /// The namespace of `topic`'s records, if it is an input topic.
    pub fn namespace_of(&self, topic: &str) -> Option<&str> {
        self.topics.iter().find(|t| t.topic == topic).map(|t| t.namespace.as_str())
    }

    /// The topics' names.
    pub fn topic_names(&self) -> Vec<&str> {
        self.topics.iter().map(|t| t.topic.as_str()).collect()
    }
}

/// Parses `INPUT_TOPICS`: `topic=namespace` pairs separated by commas (`orders=scores,chat-in=chat`);
/// `topic` alone or `topic=` publishes to the default namespace. Empty: no input.
///
/// # Errors
/// A message naming the first entry that is not a legal topic name, or a topic given twice.
pub fn parse_topics(text: &str) -> Result<Vec<InputTopic>, String> {
    let mut out: Vec<InputTopic> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (topic, namespace) = entry.split_once('=').map_or((entry, ""), |(t, n)| (t.trim(), n.trim()));
        if let Some(e) = shared::kafka::topic_name_problem(topic) {
            return Err(format!("{entry:?}: {e}"));
        }
        if out.iter().any(|t| t.topic == topic) {
            return Err(format!("topic {topic} is given twice"));
        }
        out.push(InputTopic { topic: topic.to_owned(), namespace: namespace.to_owned() });
    }
    Ok(out)
}

/// What is wrong with `topics` given the fleet's `namespaces` and the publisher's own topics (an
/// input topic that is the events or the snapshot topic would read back what it writes), one
/// message each.
pub fn problems(topics: &[InputTopic], namespaces: &Namespaces, own: &[&str]) -> Vec<String> {
    let mut p = Vec::new();
    for t in topics {
        if own.contains(&t.topic.as_str()) {
            p.push(format!("INPUT_TOPICS (--input-topics): {} is one of the publisher's own topics; it would read back what it writes", t.topic));
        }
        let probe = if t.namespace.is_empty() { "x".to_owned() } else { format!("{}:x", t.namespace) };
        match shared::ChannelId::parse(&probe) {
            Ok(id) => {
                if let Err(e) = namespaces.of(&id) {
                    p.push(format!("INPUT_TOPICS (--input-topics): {}={}: {e}", t.topic, t.namespace));
                }
            }
            Err(e) => p.push(format!("INPUT_TOPICS (--input-topics): {}={}: not a namespace ({e})", t.topic, t.namespace)),
        }
    }
    p
}

/// `INPUT_TOPICS` as `--check-config` prints it.
pub fn describe_topics(topics: &[InputTopic]) -> String {
    topics.iter().map(|t| format!("{}={}", t.topic, t.namespace)).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(t: &str, n: &str) -> InputTopic {
        InputTopic { topic: t.into(), namespace: n.into() }
    }

    #[test]
    fn input_topics_table() {
        let cases: Vec<(&str, Result<Vec<InputTopic>, &str>)> = vec![
            ("", Ok(vec![])),
            ("orders=scores", Ok(vec![topic("orders", "scores")])),
            (" orders = scores , chat-in=chat ", Ok(vec![topic("orders", "scores"), topic("chat-in", "chat")])),
            ("plain", Ok(vec![topic("plain", "")])),
            ("plain=", Ok(vec![topic("plain", "")])),
            ("a=x,,b=y,", Ok(vec![topic("a", "x"), topic("b", "y")])),
            ("bad topic=x", Err("may only contain")),
            ("a=x,a=y", Err("given twice")),
            ("=x", Err("must be 1 to 249")),
        ];
        for (text, want) in cases {
            match (parse_topics(text), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{text:?}"),
                (Err(e), Err(part)) => assert!(e.contains(part), "{text:?}: {e}"),
                (got, want) => panic!("{text:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn an_input_topic_needs_a_known_namespace_and_not_an_own_topic() {
        let spaces = Namespaces::from_toml("[namespaces.scores]\nmodel = \"json\"\n", shared::CanvasDims { width: 8, height: 8 }).unwrap();
        assert!(problems(&[topic("orders", "scores"), topic("plain", "")], &spaces, &["events"]).is_empty());
        let p = problems(&[topic("orders", "nope"), topic("events", "scores"), topic("x", "a:b")], &spaces, &["events"]);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].contains("orders=nope"), "{p:?}");
        assert!(p[1].contains("read back what it writes"), "{p:?}");
        assert!(p[2].contains("not a namespace"), "{p:?}");
    }
}
