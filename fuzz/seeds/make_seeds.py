#!/usr/bin/env python3
"""Writes the hand-made seeds of every fuzz target into fuzz/corpus/<target>/seed-*.

The seeds are valid inputs and edge cases (empty, huge numbers, unicode, deep nesting, truncated
binary values); the fuzzer's own finds sit beside them, minimized. Re-running this rewrites the
seed-* files only.
"""
import json, os, struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus")


def write(target, items):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    for name, data in items.items():
        if isinstance(data, str):
            data = data.encode()
        with open(os.path.join(d, "seed-" + name), "wb") as f:
            f.write(data)


def ev(canvas="c1", version=1, x=0, y=0, color="#000000", at=1764400000000, **extra):
    d = {"canvas": canvas, "version": version, "x": x, "y": y, "color": color, "published_at_ms": at}
    d.update(extra)
    return json.dumps(d, separators=(",", ":"), ensure_ascii=False)


def deep(n, inner="1"):
    return "[" * n + inner + "]" * n


# --- snapshot values (shared/src/snapshot.rs): version byte, u32 BE header length, header JSON,
# then the pixels as an LZ4 block with the uncompressed length prepended (u32 LE).
def lz4_literals(data):
    """An LZ4 block that is one literal-only sequence (always valid)."""
    n = len(data)
    if n < 15:
        return bytes([n << 4]) + data
    out = bytearray([0xF0])
    rest = n - 15
    while rest >= 255:
        out.append(255)
        rest -= 255
    out.append(rest)
    return bytes(out) + data


def lz4_white(n):
    """n (>= 17) bytes of 0xff: one literal, a match at offset 1, then 5 literals (LZ4's end rules)."""
    match = n - 1 - 5
    ml = match - 4
    out = bytearray([0x10 | min(ml, 15), 0xFF, 1, 0])
    if ml >= 15:
        rest = ml - 15
        while rest >= 255:
            out.append(255)
            rest -= 255
        out.append(rest)
    out += bytes([0x50]) + b"\xff" * 5
    return bytes(out)


def frame(header, body=b"", version=1, length=None):
    h = json.dumps(header, separators=(",", ":")).encode() if isinstance(header, dict) else header
    return bytes([version]) + struct.pack(">I", len(h) if length is None else length) + h + body


def canvas_header(canvas="c1", w=2, h=2, **kw):
    d = {"canvas": canvas, "version": 5, "epoch": 0, "width": w, "height": h, "offset": 42, "compression": "lz4"}
    d.update(kw)
    return d


def pixels(block, n):
    return struct.pack("<I", n) + block


px12 = bytes(range(12))
good = frame(canvas_header(), pixels(lz4_literals(px12), 12))
white = frame(canvas_header(w=8, h=4), pixels(lz4_white(96), 96))
big_literals = frame(canvas_header(w=16, h=16), pixels(lz4_literals(bytes(range(256)) * 3), 768))

write("snapshot_record", {
    "canvas-2x2": b"c1\n" + good,
    "canvas-8x4-white": b"c1\n" + white,
    "canvas-16x16-literals": b"c1\n" + big_literals,
    "canvas-reset-epoch": b"c1\n" + frame(canvas_header(epoch=3), pixels(lz4_literals(px12), 12)),
    "canvas-no-epoch-extra-field": b"c1\n" + frame({"canvas": "c1", "version": 1, "width": 2, "height": 2, "offset": 0, "compression": "lz4", "x": 1}, pixels(lz4_literals(px12), 12)),
    "checkpoint": b"#checkpoint\n" + frame({"checkpoint": 77}),
    "checkpoint-negative": b"#checkpoint\n" + frame({"checkpoint": -9223372036854775808}),
    "checkpoint-with-body": b"#checkpoint\n" + frame({"checkpoint": 1}, b"trailing"),
    "no-newline-is-value-of-c1": good,
    "empty": b"",
    "empty-key": b"\n" + good,
    "tombstone-like-empty-value": b"c1\n",
    "truncated-header": b"c1\n" + good[:10],
    "truncated-length": b"c1\n" + good[:3],
    "truncated-lz4": b"c1\n" + good[:-1],
    "truncated-lz4-match": b"c1\n" + white[:-6],
    "declared-size-huge": b"c1\n" + frame(canvas_header(), pixels(lz4_literals(px12), 0xFFFFFFFF)),
    "header-length-huge": b"c1\n" + frame(canvas_header(), b"", length=0xFFFFFFFF),
    "newer-format": b"c1\n" + frame(canvas_header(), pixels(lz4_literals(px12), 12), version=2),
    "format-zero": b"c1\n" + frame(canvas_header(), pixels(lz4_literals(px12), 12), version=0),
    "width-zero": b"c1\n" + frame(canvas_header(w=0), pixels(b"", 0)),
    "width-1025": b"c1\n" + frame(canvas_header(w=1025, h=1), pixels(lz4_literals(b"\0" * 3075), 3075)),
    "largest-canvas-declared": b"c1\n" + frame(canvas_header(w=1024, h=1024), pixels(lz4_white(64), 3 * 1024 * 1024)),
    "compression-zstd": b"c1\n" + frame(canvas_header(compression="zstd"), pixels(lz4_literals(px12), 12)),
    "key-mismatch": b"c2\n" + good,
    "bad-key": b"no spaces\n" + good,
    "non-utf8-key": b"\xff\xfe\n" + good,
    "lz4-offset-zero": b"c1\n" + frame(canvas_header(w=8, h=4), pixels(bytes([0x1F, 0xFF, 0, 0, 71, 0x50]) + b"\xff" * 5, 96)),
    "lz4-offset-too-far": b"c1\n" + frame(canvas_header(w=8, h=4), pixels(bytes([0x1F, 0xFF, 0xFF, 0xFF, 71, 0x50]) + b"\xff" * 5, 96)),
    "lz4-too-long": b"c1\n" + frame(canvas_header(), pixels(lz4_literals(px12 + b"extra"), 12)),
    "header-not-json": b"c1\n" + frame(b"{not json", pixels(lz4_literals(px12), 12)),
    "header-unicode-canvas": b"c1\n" + frame(canvas_header(canvas="c\u00e9"), pixels(lz4_literals(px12), 12)),
    "header-huge-numbers": b"c1\n" + frame(b'{"canvas":"c1","version":18446744073709551616,"width":2,"height":2,"offset":1e400,"compression":"lz4"}', pixels(lz4_literals(px12), 12)),
    "header-deep": b"c1\n" + frame(('{"canvas":' + deep(300) + "}").encode()),
})

# --- Kafka record values of the events topic (shared/src/event.rs)
group3 = "[" + ",".join(ev(version=v, x=v) for v in (4, 5, 6)) + "]"
write("pixel_record", {
    "event": ev(version=13, x=1, y=2, color="#ff0000"),
    "group-of-3": group3,
    "group-of-1": "[" + ev() + "]",
    "group-leading-space": "  \n" + group3,
    "group-empty": "[]",
    "group-two-canvases": "[" + ev("c1", 1) + "," + ev("c2", 2) + "]",
    "group-not-consecutive": "[" + ev(version=1) + "," + ev(version=3) + "]",
    "group-backwards": "[" + ev(version=2) + "," + ev(version=1) + "]",
    "group-max-version-last": "[" + ev(version=18446744073709551614) + "," + ev(version=18446744073709551615) + "]",
    "version-max": ev(version=18446744073709551615),
    "version-overflow": ev().replace('"version":1', '"version":18446744073709551616'),
    "version-negative": ev(version=-1),
    "version-float": ev().replace('"version":1', '"version":1.0'),
    "version-exponent": ev().replace('"version":1', '"version":1e3'),
    "x-string": ev(x="1"),
    "x-u32-overflow": ev(x=4294967296),
    "unknown-field": ev(z=1),
    "duplicate-field": ev()[:-1] + ',"x":2}',
    "color-name": ev(color="red"),
    "color-upper": ev(color="#FFFFFF"),
    "color-unicode": ev(color="#ff\u00e900"),
    "canvas-unicode": ev(canvas="\u00e9"),
    "canvas-escaped": ev().replace('"canvas":"c1"', '"canvas":"\\u0063\\u0031"'),
    "canvas-65": ev(canvas="a" * 65),
    "truncated": ev()[:30],
    "trailing-garbage": ev() + " x",
    "two-objects": ev() + ev(),
    "deep-array": deep(200),
    "deep-object": '{"canvas":' * 200 + "1" + "}" * 200,
    "null": "null",
    "empty": "",
    "empty-object": "{}",
    "string": '"c1"',
    "non-utf8": b'{"canvas":"c\xff1","version":1}',
})

# --- GET /ws query (shared/src/protocol.rs WsQuery)
write("ws_query", {
    "first-connect": "canvas=c1",
    "resume": "canvas=c1&since=40&epoch=q5XGvJ9mR2yqH7Y1cjTQfA-0&refusal=frame",
    "token": "canvas=c1&since=4&token=a.b%2Bc.d&refusal=http",
    "token-spaces": "canvas=c1&token=a+b%20c&since=0",
    "token-invalid-utf8": "canvas=c1&token=%FF%FE",
    "token-empty": "canvas=c1&token=",
    "empty": "",
    "escaped-canvas": "canvas=a%2Db&since=18446744073709551615",
    "since-overflow": "canvas=c1&since=18446744073709551616",
    "since-negative": "canvas=c1&since=-1",
    "since-empty": "canvas=c1&since=",
    "canvas-unicode": "canvas=%C3%A9",
    "canvas-nul": "canvas=c1%00",
    "canvas-65": "canvas=" + "a" * 65,
    "canvas-twice": "canvas=c1&canvas=c2",
    "epoch-empty": "canvas=c1&epoch=",
    "epoch-101": "canvas=c1&epoch=" + "x" * 101,
    "epoch-plus": "canvas=c1&epoch=a+b",
    "refusal-unknown": "canvas=c1&refusal=smoke",
    "unknown-params": "canvas=c1&unknown=1&cache=x",
    "separators-only": "&&&=&==",
    "non-utf8": b"canvas=c\xff1",
})

# --- small string parsers
write("canvas_id", {
    "short": "c1", "all-classes": "A-b_9", "empty": "", "max": "a" * 64, "too-long": "a" * 65,
    "space": "c 1", "slash": "c/1", "unicode": "\u00e9", "non-utf8": b"c\xff", "dash": "-", "nul": "c\x001",
})
write("color", {
    "lower": "#ff0080", "upper": "#FF0080", "no-hash": "ff0000", "short": "#ff000", "long": "#ff00000",
    "not-hex": "#gg0000", "empty": "", "hash": "#", "unicode-7-bytes": "#\u00ff\u00ff\u00ff", "sign": "#+12345",
    "non-utf8": b"#ff\xff000",
})
write("epoch", {
    "topic-id": "q5XGvJ9mR2yqH7Y1cjTQfA-0", "zero-topic": "AAAAAAAAAAAAAAAAAAAAAA-3", "empty": "",
    "max": "x" * 100, "too-long": "x" * 101, "space": "a b", "plus": "a+b", "unicode": "\u00e9", "punct": "-_-",
})

# --- publisher bodies (core-publisher/src/api.rs)
def body(**kw):
    return json.dumps(kw, separators=(",", ":"), ensure_ascii=False)

write("pixel_body", {
    "valid": body(x=1, y=2, color="#ff0000"),
    "valid-upper-spaced": '\n { "x" : 0 , "y" : 0 , "color" : "#ABCDEF" } \n',
    "x-max": body(x=4294967295, y=0, color="#000000"),
    "x-overflow": body(x=4294967296, y=0, color="#000000"),
    "x-negative": body(x=-1, y=0, color="#000000"),
    "x-string": body(x="1", y=0, color="#000000"),
    "x-float": '{"x":1.0,"y":0,"color":"#000000"}',
    "x-exponent": '{"x":1e2,"y":0,"color":"#000000"}',
    "x-huge": '{"x":1e400,"y":0,"color":"#000000"}',
    "missing-color": body(x=1, y=2),
    "unknown-field": body(x=1, y=2, color="#ff0000", z=3),
    "duplicate-x": '{"x":1,"x":2,"y":0,"color":"#000000"}',
    "escaped-key": '{"\\u0078":1,"y":0,"color":"#000000"}',
    "color-unicode": body(x=1, y=2, color="#ff\u00e900"),
    "color-null": '{"x":1,"y":2,"color":null}',
    "array-form": '[1,2,"#ff0000"]',
    "empty": "",
    "spaces": "   ",
    "null": "null",
    "trailing": body(x=1, y=2, color="#ff0000") + " trailing",
    "two-objects": body(x=1, y=2, color="#ff0000") * 2,
    "truncated": body(x=1, y=2, color="#ff0000")[:-2],
    "deep-in-field": '{"x":' + deep(300) + "}",
    "deep-unknown": '{"z":' + '{"z":' * 300 + "1" + "}" * 301,
    "bom": b"\xef\xbb\xbf" + body(x=1, y=2, color="#ff0000").encode(),
    "non-utf8-string": b'{"x":1,"y":2,"color":"#ff\xff00"}',
})

def bev(canvas="c1", x=0, y=0, color="#000000", **kw):
    d = {"canvas": canvas, "x": x, "y": y, "color": color}
    d.update(kw)
    return d

def batch(*events, **kw):
    d = {"events": list(events)}
    d.update(kw)
    return json.dumps(d, separators=(",", ":"), ensure_ascii=False)

write("batch_body", {
    "valid": batch(bev("c1", 1, 2, "#ff0000", idempotency_key="k-1"), bev("c2", 63, 47, "#00FF00")),
    "valid-one": batch(bev()),
    "valid-null-key": batch(bev(idempotency_key=None)),
    "no-events": batch(),
    "events-null": '{"events":null}',
    "events-object": '{"events":{}}',
    "missing-events": "{}",
    "x-off-canvas": batch(bev(), bev(x=64)),
    "y-off-canvas": batch(bev(y=48)),
    "x-overflow": batch(bev(x=4294967296)),
    "duplicate-keys": batch(bev(idempotency_key="k"), bev(idempotency_key="k")),
    "key-empty": batch(bev(idempotency_key="")),
    "key-129": batch(bev(idempotency_key="k" * 129)),
    "key-space": batch(bev(idempotency_key="a b")),
    "key-unicode": batch(bev(idempotency_key="cl\u00e9")),
    "canvas-bad": batch(bev(canvas="c 1")),
    "canvas-65": batch(bev(canvas="a" * 65)),
    "unknown-event-field": batch(bev(z=1)),
    "unknown-top-field": batch(bev(), z=1),
    "1001-events": batch(*[bev() for _ in range(1001)]),
    "deep": '{"events":' + deep(300) + "}",
    "array-form": "[[]]",
    "empty": "",
    "trailing": batch(bev()) + "]",
})

# --- node admin bodies (shared/src/api.rs, checked in ws-node/src/http.rs)
write("node_drain_body", {
    "maintenance": body(reason="MAINTENANCE"),
    "failback-partitions": body(reason="FAILBACK_TO_RECOVERED_SERVER", grace_ms=0, partitions=[0, 11]),
    "shutdown": body(reason="SHUTDOWN"),
    "revoked": body(reason="PARTITIONS_REVOKED"),
    "lowercase-reason": body(reason="maintenance"),
    "reason-number": '{"reason":1}',
    "grace-max": body(reason="MAINTENANCE", grace_ms=60000),
    "grace-over": body(reason="MAINTENANCE", grace_ms=60001),
    "grace-u64-max": body(reason="MAINTENANCE", grace_ms=18446744073709551615),
    "grace-overflow": '{"reason":"MAINTENANCE","grace_ms":18446744073709551616}',
    "partition-12": body(reason="MAINTENANCE", partitions=[12]),
    "partition-negative": body(reason="MAINTENANCE", partitions=[-1]),
    "partition-i32-overflow": body(reason="MAINTENANCE", partitions=[2147483648]),
    "partitions-null": '{"reason":"MAINTENANCE","partitions":null}',
    "partitions-empty": body(reason="MAINTENANCE", partitions=[]),
    "unknown-field": body(reason="MAINTENANCE", x=1),
    "empty": "",
    "empty-object": "{}",
})
write("node_hold_body", {
    "valid": body(partitions=[0, 1], for_ms=1000),
    "for-zero": body(partitions=[0], for_ms=0),
    "for-max": body(partitions=[], for_ms=60000),
    "for-over": body(partitions=[0], for_ms=60001),
    "for-negative": body(partitions=[0], for_ms=-1),
    "for-float": '{"partitions":[0],"for_ms":1.5}',
    "missing-partitions": body(for_ms=10),
    "negative-partition": body(partitions=[-5], for_ms=10),
    "unknown-field": body(partitions=[0], for_ms=10, z=0),
    "empty": "",
})

# --- gateway drain body (gateway/src/api.rs)
write("gateway_drain_body", {
    "empty": "", "empty-object": "{}", "zero": body(grace_ms=0), "max": body(grace_ms=60000),
    "over": body(grace_ms=60001), "negative": body(grace_ms=-1), "spaces": "   ",
    "null": '{"grace_ms":null}', "unknown": body(grace=1), "array": "[1]",
    "overflow": '{"grace_ms":18446744073709551616}',
})
