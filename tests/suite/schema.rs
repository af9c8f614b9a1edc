//! One record schema: `RequestRecord` (`src/meter/record.rs`) is the description, and every
//! other list of its fields is held to it here, read through serde rather than written again:
//! the report's `Row` (`src/report/row.rs`), the fast reader's field list (`src/report/fast.rs`),
//! bench's load tags (`src/tags.rs`), the ClickHouse table (`deploy/clickhouse/schema.sql`), the
//! sink's rows (`src/export/clickhouse.rs`) and the report's queries (`src/report/sql.rs`). A
//! field added to the record and forgotten in one of them fails here, naming the list.
//!
//! The types' field names and kinds are read by a probe: a serde `Deserializer` that answers
//! every field a type asks for with a sample value of the kind asked (so the record comes out
//! with every field set) and notes the kind per dotted path (`gateway_tap.relay_ms`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::de::value::{BorrowedStrDeserializer, Error};
use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, Visitor};
use serde::Deserialize;
use serde_json::Value;

use tokentap::meter::RequestRecord;
use tokentap::report::row::Row;
use tokentap::tags::LoadTags;

/// Record fields the ClickHouse table does not store, each with its reason. Every entry must be
/// a record field and must be absent from `schema.sql`. Empty: the table stores every field.
const NOT_STORED: &[(&str, &str)] = &[];

/// The nested objects of the record and the prefix their fields take as columns.
const FLATTENED: &[(&str, &str)] = &[
    ("experiment", "experiment_"),
    ("gateway_tap", "tap_"),
    ("ttft_split", "ttft_split_"),
    ("delivery", "delivery_"),
];

/// What a field holds, as serde was asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    /// An integer: signed, bits.
    Int(bool, u32),
    Float,
    /// A string, or an enum (written as its variant's name).
    Text,
    /// An object; its fields have paths of their own.
    Object,
    /// Read only for its presence (`IgnoredAny`).
    Any,
}

impl Kind {
    /// Two readings of one field agree (a reader may read an integer wider).
    fn agrees(self, other: Kind) -> bool {
        match (self, other) {
            (Kind::Int(..), Kind::Int(..)) => true,
            (Kind::Any, _) | (_, Kind::Any) => true,
            (a, b) => a == b,
        }
    }
}

/// A field: its kind, and whether it may be null (an `Option`, or inside one).
#[derive(Debug, Clone, Copy)]
struct Field {
    kind: Kind,
    nullable: bool,
}

type Fields = BTreeMap<String, Field>;

struct Probe<'a> {
    path: String,
    nullable: bool,
    out: &'a RefCell<Fields>,
}

impl Probe<'_> {
    fn note(&self, kind: Kind) {
        let f = Field {
            kind,
            nullable: self.nullable,
        };
        self.out.borrow_mut().insert(self.path.clone(), f);
    }
}

macro_rules! int {
    ($($method:ident $visit:ident $t:ty, $signed:expr, $bits:expr;)*) => {$(
        fn $method<V: Visitor<'static>>(self, v: V) -> Result<V::Value, Error> {
            self.note(Kind::Int($signed, $bits));
            v.$visit(7 as $t)
        }
    )*};
}

impl<'a> Deserializer<'static> for Probe<'a> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'static>>(self, _: V) -> Result<V::Value, Error> {
        Err(de::Error::custom(format!(
            "{}: a kind the schema test does not know; teach its probe",
            self.path
        )))
    }

    fn deserialize_bool<V: Visitor<'static>>(self, v: V) -> Result<V::Value, Error> {
        self.note(Kind::Bool);
        v.visit_bool(true)
    }

    int! {
        deserialize_u8 visit_u8 u8, false, 8;
        deserialize_u16 visit_u16 u16, false, 16;
        deserialize_u32 visit_u32 u32, false, 32;
        deserialize_u64 visit_u64 u64, false, 64;
        deserialize_i8 visit_i8 i8, true, 8;
        deserialize_i16 visit_i16 i16, true, 16;
        deserialize_i32 visit_i32 i32, true, 32;
        deserialize_i64 visit_i64 i64, true, 64;
    }

    fn deserialize_f64<V: Visitor<'static>>(self, v: V) -> Result<V::Value, Error> {
        self.note(Kind::Float);
        v.visit_f64(1.5)
    }

    fn deserialize_str<V: Visitor<'static>>(self, v: V) -> Result<V::Value, Error> {
        self.note(Kind::Text);
        v.visit_borrowed_str("x")
    }

    fn deserialize_string<V: Visitor<'static>>(self, v: V) -> Result<V::Value, Error> {
        self.deserialize_str(v)
    }

    fn deserialize_option<V: Visitor<'static>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_some(Probe {
            nullable: true,
            ..self
        })
    }

    fn deserialize_ignored_any<V: Visitor<'static>>(self, v: V) -> Result<V::Value, Error> {
        self.note(Kind::Any);
        v.visit_unit()
    }

    fn deserialize_struct<V: Visitor<'static>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        self.note(Kind::Object);
        v.visit_map(Members {
            probe: self,
            fields,
            at: 0,
        })
    }

    fn deserialize_enum<V: Visitor<'static>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        self.note(Kind::Text);
        v.visit_enum(Variant(variants[0]))
    }

    serde::forward_to_deserialize_any! {
        <W: Visitor<'static>>
        i128 u128 f32 char bytes byte_buf unit unit_struct newtype_struct seq tuple
        tuple_struct map identifier
    }
}

struct Members<'a> {
    probe: Probe<'a>,
    fields: &'static [&'static str],
    at: usize,
}

impl<'a> de::MapAccess<'static> for Members<'a> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'static>>(
        &mut self,
        k: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.fields.get(self.at) {
            Some(f) => k.deserialize(BorrowedStrDeserializer::new(f)).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'static>>(&mut self, s: S) -> Result<S::Value, Error> {
        let name = self.fields[self.at];
        self.at += 1;
        let path = match self.probe.path.as_str() {
            "" => name.to_owned(),
            p => format!("{p}.{name}"),
        };
        s.deserialize(Probe {
            path,
            nullable: self.probe.nullable,
            out: self.probe.out,
        })
    }
}

struct Variant(&'static str);

impl de::EnumAccess<'static> for Variant {
    type Error = Error;
    type Variant = Variant;

    fn variant_seed<S: DeserializeSeed<'static>>(self, s: S) -> Result<(S::Value, Variant), Error> {
        let name: de::value::StrDeserializer<'_, Error> = self.0.into_deserializer();
        Ok((s.deserialize(name)?, self))
    }
}

impl de::VariantAccess<'static> for Variant {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        Ok(())
    }

    fn newtype_variant_seed<S: DeserializeSeed<'static>>(self, _: S) -> Result<S::Value, Error> {
        Err(de::Error::custom("only unit variants are written as text"))
    }

    fn tuple_variant<V: Visitor<'static>>(self, _: usize, _: V) -> Result<V::Value, Error> {
        Err(de::Error::custom("only unit variants are written as text"))
    }

    fn struct_variant<V: Visitor<'static>>(
        self,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Error> {
        Err(de::Error::custom("only unit variants are written as text"))
    }
}

/// A `T` with every field set, and its fields by dotted path (objects included).
fn probe<T: Deserialize<'static>>() -> (T, Fields) {
    let out = RefCell::new(Fields::new());
    let value = T::deserialize(Probe {
        path: String::new(),
        nullable: false,
        out: &out,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let mut fields = out.into_inner();
    fields.remove("");
    (value, fields)
}

/// The record's fields: read through serde, and checked against what the record, every field
/// set, serialises to (so no field is skipped or renamed on the way out).
fn record() -> (RequestRecord, Fields) {
    let (rec, fields): (RequestRecord, Fields) = probe();
    let json = serde_json::to_value(&rec).unwrap();
    let mut written = BTreeSet::new();
    fn walk(v: &Value, at: &str, out: &mut BTreeSet<String>) {
        if let Value::Object(o) = v {
            for (k, v) in o {
                let p = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                walk(v, &p, out);
                out.insert(p);
            }
        }
    }
    walk(&json, "", &mut written);
    let read: BTreeSet<String> = fields.keys().cloned().collect();
    assert_eq!(read, written, "the record reads and writes the same fields");
    (rec, fields)
}

fn top(fields: &Fields) -> BTreeSet<&str> {
    fields
        .keys()
        .filter(|k| !k.contains('.'))
        .map(String::as_str)
        .collect()
}

#[test]
fn the_report_reads_only_record_fields_of_their_kinds() {
    let (_, rec) = record();
    let (_, row): (Row<'static>, Fields) = probe();
    for (path, f) in &row {
        let Some(r) = rec.get(path) else {
            panic!("src/report/row.rs reads `{path}`, which RequestRecord does not have");
        };
        assert!(
            f.kind.agrees(r.kind),
            "src/report/row.rs reads `{path}` as {:?}; the record writes {:?}",
            f.kind,
            r.kind
        );
    }
}

#[test]
fn the_fast_reader_reads_exactly_the_rows_fields() {
    let (_, row): (Row<'static>, Fields) = probe();
    let fast = tokentap::report::fast_fields();
    let fast_set: BTreeSet<&str> = fast.iter().copied().collect();
    assert_eq!(
        fast.len(),
        fast_set.len(),
        "a field twice in src/report/fast.rs"
    );
    let rows = top(&row);
    let mut wrong: Vec<String> = Vec::new();
    for f in rows.difference(&fast_set) {
        wrong.push(format!(
            "src/report/row.rs reads `{f}`; src/report/fast.rs's FIELDS lacks it"
        ));
    }
    for f in fast_set.difference(&rows) {
        wrong.push(format!(
            "src/report/fast.rs's FIELDS has `{f}`; src/report/row.rs's Row lacks it"
        ));
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn load_tags_are_record_fields() {
    let (_, rec) = record();
    let json = serde_json::to_value(LoadTags {
        bucket: Some("balanced".into()),
        concurrency: Some(1),
        request_rate: Some(1.0),
        turn: Some(1),
    })
    .unwrap();
    let serialised: BTreeSet<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let listed: BTreeSet<&str> = LoadTags::FIELDS.iter().map(|(_, f)| *f).collect();
    assert_eq!(serialised, listed, "src/tags.rs: LoadTags and its FIELDS");
    for f in listed {
        assert!(
            rec.get(f).is_some_and(|r| r.nullable),
            "src/tags.rs tags `{f}`: RequestRecord needs an optional field of that name"
        );
    }
}

/// `deploy/clickhouse/schema.sql`'s `requests` table: column → type, the materialised ones
/// (made from `ts`) left out.
fn table() -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/clickhouse/schema.sql");
    let sql = std::fs::read_to_string(path).unwrap();
    let body = sql
        .split_once("CREATE TABLE IF NOT EXISTS requests")
        .and_then(|(_, rest)| rest.split_once("\n)"))
        .map(|(b, _)| b)
        .expect("schema.sql has CREATE TABLE IF NOT EXISTS requests ( … )");
    let mut cols = BTreeMap::new();
    for line in body.lines() {
        let line = line.split("--").next().unwrap_or("").trim();
        let line = line.trim_end_matches(',');
        let Some((name, ty)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            continue; // "(", or a continued expression
        }
        if ty.contains("MATERIALIZED") {
            continue;
        }
        let old = cols.insert(name.to_owned(), ty.trim().to_owned());
        assert!(old.is_none(), "schema.sql: column {name} twice");
    }
    assert!(cols.len() > 20, "schema.sql: {} columns read", cols.len());
    cols
}

/// The record's columns: its plain fields, and its objects' fields flattened.
fn columns(rec: &Fields) -> BTreeMap<String, (String, Field)> {
    let mut out = BTreeMap::new();
    for (path, f) in rec {
        if f.kind == Kind::Object {
            assert!(
                FLATTENED.iter().any(|(o, _)| o == path),
                "record field `{path}` is an object: give it a prefix in FLATTENED (tests/suite/schema.rs), \
                 src/export/clickhouse.rs and scripts/clickhouse_check.py"
            );
            continue;
        }
        let col = match path.split_once('.') {
            None => path.clone(),
            Some((obj, field)) => {
                let (_, prefix) = FLATTENED
                    .iter()
                    .find(|(o, _)| *o == obj)
                    .unwrap_or_else(|| panic!("`{path}`: an object not in FLATTENED"));
                assert!(
                    !field.contains('.'),
                    "`{path}`: objects nest one deep in the table"
                );
                format!("{prefix}{field}")
            }
        };
        assert!(
            out.insert(col.clone(), (path.clone(), *f)).is_none(),
            "two fields make column {col}"
        );
    }
    out
}

/// A ClickHouse type that holds the field's values.
fn compatible(f: Field, ty: &str) -> bool {
    let inner = match ty
        .strip_prefix("Nullable(")
        .and_then(|t| t.strip_suffix(')'))
    {
        Some(t) => t,
        None if f.nullable => return false,
        None => ty,
    };
    let inner = inner
        .strip_prefix("LowCardinality(")
        .and_then(|t| t.strip_suffix(')'))
        .filter(|_| f.kind == Kind::Text)
        .unwrap_or(inner);
    let int = |t: &str| -> Option<(bool, u32)> {
        let (signed, bits) = match t.strip_prefix("UInt") {
            Some(b) => (false, b),
            None => (true, t.strip_prefix("Int")?),
        };
        Some((signed, bits.parse().ok()?))
    };
    match f.kind {
        Kind::Text => inner == "String",
        Kind::Float => inner == "Float64",
        Kind::Bool => inner == "UInt8",
        Kind::Int(signed, bits) => match int(inner) {
            Some((false, b)) => !signed && b >= bits,
            Some((true, b)) => b > bits || (signed && b == bits),
            None => false,
        },
        Kind::Object | Kind::Any => false,
    }
}

#[test]
fn the_clickhouse_table_stores_every_record_field_in_a_fitting_type() {
    let (_, rec) = record();
    let cols = columns(&rec);
    let table = table();
    let mut wrong = Vec::new();
    for (field, why) in NOT_STORED {
        let col = cols.iter().find(|(_, (p, _))| p == field).map(|(c, _)| c);
        if why.is_empty() {
            wrong.push(format!("NOT_STORED: `{field}` needs its reason"));
        } else if col.is_none() {
            wrong.push(format!("NOT_STORED names `{field}`, not a record field"));
        } else if col.is_some_and(|c| table.contains_key(c)) {
            wrong.push(format!(
                "NOT_STORED names `{field}`, but schema.sql stores it"
            ));
        }
    }
    for (col, (path, f)) in &cols {
        if NOT_STORED.iter().any(|(p, _)| p == path) {
            continue;
        }
        match table.get(col) {
            None => wrong.push(format!(
                "record field `{path}` has no column `{col}` in deploy/clickhouse/schema.sql \
                 (add it, or list it in NOT_STORED in tests/suite/schema.rs with a reason)"
            )),
            Some(ty) if !compatible(*f, ty) => wrong.push(format!(
                "schema.sql: `{col} {ty}` cannot hold record field `{path}` ({:?}{})",
                f.kind,
                if f.nullable { ", nullable" } else { "" }
            )),
            Some(_) => {}
        }
    }
    for col in table.keys().filter(|c| !cols.contains_key(*c)) {
        wrong.push(format!(
            "schema.sql has column `{col}`, which is no record field"
        ));
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn the_sink_writes_the_tables_columns() {
    let (rec, fields) = record();
    let row = tokentap::export::clickhouse::row(&rec);
    let written: BTreeSet<&str> = row.keys().map(String::as_str).collect();
    let cols = columns(&fields);
    let want: BTreeSet<&str> = cols.keys().map(String::as_str).collect();
    let mut wrong: Vec<String> = Vec::new();
    for c in want.difference(&written) {
        wrong.push(format!("src/export/clickhouse.rs writes no `{c}`"));
    }
    for c in written.difference(&want) {
        wrong.push(format!(
            "src/export/clickhouse.rs writes `{c}`, no column of the record's"
        ));
    }
    for (k, v) in &row {
        if v.is_object() || v.is_array() || v.is_boolean() {
            wrong.push(format!(
                "src/export/clickhouse.rs writes {k}: {v} (flat numbers and text only)"
            ));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn the_reports_queries_name_columns_of_the_table() {
    let (_, rec) = record();
    let split: BTreeSet<&str> = rec
        .keys()
        .filter_map(|k| k.strip_prefix("ttft_split."))
        .collect();
    let listed: BTreeSet<&str> = tokentap::report::sql::SPLIT.iter().copied().collect();
    assert_eq!(
        split, listed,
        "src/report/sql.rs's SPLIT against the record's ttft_split"
    );
    let table = table();
    let p = tokentap::report::sql::Params {
        table: "default.requests".into(),
        top: 20,
        by_arm: true,
        gateway: "gateway".into(),
        direct: "direct".into(),
        goodput_ttft_ms: 1000.0,
        goodput_tok_s: 10.0,
        window: None,
        run_id: Some("r1".into()),
    };
    let mut seen = 0;
    for q in tokentap::report::sql::queries(&p) {
        let words = q
            .sql
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty());
        for w in words {
            if FLATTENED.iter().any(|(_, prefix)| w.starts_with(prefix)) {
                seen += 1;
                assert!(
                    table.contains_key(w),
                    "src/report/sql.rs's {} query reads `{w}`, not a column of schema.sql",
                    q.name
                );
            }
        }
    }
    assert!(seen > 10, "{seen} flattened columns read by the queries");
}

/// The backticked names in the first cell of every row of the tables from the top of `doc` to the
/// end of the section `heading` (the next `## `), e.g. `| \`method\`, \`endpoint\` |` names
/// two.
fn doc_fields(doc: &str, heading: &str) -> BTreeSet<String> {
    let at = doc.find(heading).unwrap() + heading.len();
    let end = doc[at..].find("\n## ").map_or(doc.len(), |e| at + e);
    let section = &doc[..end];
    let mut out = BTreeSet::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cell = line[1..].split(" | ").next().unwrap_or("");
        for (i, part) in cell.split('`').enumerate() {
            if i % 2 == 1 && !part.contains(' ') {
                out.insert(part.to_owned());
            }
        }
    }
    out
}

/// docs/records.md's field table names every field the record writes, and no other.
#[test]
fn the_records_doc_names_every_field() {
    let (_, rec) = record();
    let fields: BTreeSet<String> = top(&rec).iter().map(|s| s.to_string()).collect();
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/records.md"))
            .unwrap();
    let named = doc_fields(&doc, "## The record");
    // `itl_*` names the three ITL fields together.
    let named: BTreeSet<String> = named
        .into_iter()
        .flat_map(|n| match n.strip_suffix('*') {
            Some(prefix) => fields
                .iter()
                .filter(|f| f.starts_with(prefix))
                .cloned()
                .collect::<Vec<_>>(),
            None => vec![n],
        })
        .collect();
    let missing: Vec<&String> = fields.difference(&named).collect();
    assert!(
        missing.is_empty(),
        "docs/records.md does not describe: {missing:?}"
    );
    let unknown: Vec<&String> = named.difference(&fields).collect();
    assert!(
        unknown.is_empty(),
        "docs/records.md names fields the record lacks: {unknown:?}"
    );
}

/// The README's example record carries every field the record always writes (the fields a
/// record may leave out are absent only when they would be empty).
#[test]
fn the_readmes_record_carries_every_field() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("{\"ts\":"))
        .expect("an example record in the README");
    let example: Value = serde_json::from_str(line).unwrap();
    let (rec, _) = record();
    let full = serde_json::to_value(&rec).unwrap();
    let want: BTreeSet<&String> = full.as_object().unwrap().keys().collect();
    let got: BTreeSet<&String> = example.as_object().unwrap().keys().collect();
    let missing: Vec<&&String> = want.difference(&got).collect();
    // Each of these is written only when it has a value; the README's request had none.
    const OPTIONAL: &[&str] = &[
        "endpoint_api",
        "content_encoding",
        "decode_error",
        "trace_id",
        "span_id",
        "request_rate",
        "scheduled_ms",
        "client_queue_ms",
        "client_lag_ms",
        "turn",
        "run",
        "run_id",
        "shard",
        "shards",
        "prompt_index",
        "request_id",
        "join_id",
        "join_sent",
        "boot_id",
    ];
    let missing: Vec<&&String> = missing
        .into_iter()
        .filter(|f| !OPTIONAL.contains(&f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the README's example record lacks {missing:?}"
    );
    let unknown: Vec<&&String> = got.difference(&want).collect();
    assert!(
        unknown.is_empty(),
        "the README's example record has {unknown:?}, not record fields"
    );
}

/// `scripts/clickhouse_check.py` flattens records into table rows with the same prefixes as the
/// record's nested objects take as columns (`FLATTENED`): its third copy of that list is held
/// to this one.
#[test]
fn the_clickhouse_check_flattens_as_the_table_does() {
    let py = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/clickhouse_check.py"),
    )
    .unwrap();
    let mut found: BTreeSet<(String, String)> = BTreeSet::new();
    // `for k, v in (r.get("gateway_tap") or {}).items():` then `row[f"tap_{k}"] = v`.
    let lines: Vec<&str> = py.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let Some(rest) = l.trim().strip_prefix("for k, v in (r.get(\"") else {
            continue;
        };
        let field = rest.split('"').next().unwrap().to_owned();
        let next = lines[i + 1].trim();
        let prefix = next
            .strip_prefix("row[f\"")
            .and_then(|p| p.split('{').next())
            .unwrap()
            .to_owned();
        found.insert((field, prefix));
    }
    // The experiment's two fields are written out by name.
    if py.contains("row[\"experiment_arm\"]") && py.contains("row[\"experiment_pair_id\"]") {
        found.insert(("experiment".into(), "experiment_".into()));
    }
    let want: BTreeSet<(String, String)> = FLATTENED
        .iter()
        .map(|(f, p)| (f.to_string(), p.to_string()))
        .collect();
    assert_eq!(
        found, want,
        "scripts/clickhouse_check.py's flatten differs from FLATTENED"
    );
}
