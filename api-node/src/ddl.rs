//! A small DDL subset: one MySQL `CREATE TABLE` statement, read by the `sqlparser` crate and
//! mapped to rndb's table and index definitions.
//!
//! ```text
//! CREATE TABLE t (
//!   id INT UNSIGNED NOT NULL PRIMARY KEY,     INT [UNSIGNED], INTEGER, BIGINT [UNSIGNED],
//!   name VARCHAR(32),                         DOUBLE [PRECISION], VARCHAR(n), VARBINARY(n)
//!   email VARCHAR(64) NOT NULL UNIQUE,        a column's UNIQUE: a unique hash index
//!   UNIQUE [KEY|INDEX] [name] (a, b),         a unique hash index
//!   {INDEX|KEY} [name] (a, b),                an ordered index
//!   PRIMARY KEY (a, b)                        the primary key (a hash index, as NDB's
//! ) [ENGINE=NDB] [COMMENT='NDB_TABLE=READ_BACKUP=1']           `USING HASH`)
//! ```
//!
//! Columns are nullable unless NOT NULL or in the primary key, as in MySQL. An unnamed index
//! takes the name of its first column (`_2`, `_3`... when taken), as MySQL names it. Unlike
//! MySQL, no ordered index is added for the primary key: name one with `INDEX (id)` to scan in
//! key order. `DEFAULT NULL` (as mysqldump writes it) is read on nullable columns.
//! `AUTO_INCREMENT` marks an integer column whose values the application takes from
//! [`Cluster::auto_increment_value`] (the table's counter, as mysqld takes them). Anything
//! else (another type, another DEFAULT, FOREIGN KEY, IF NOT EXISTS,
//! another engine...) is refused with a [`DdlError::Unsupported`] that names it, rather than
//! silently dropped.

use sqlparser::ast::{
    self, CharacterLength, ColumnOption, CommentDef, CreateTable, DataType, Expr, IndexColumn,
    SqlOption, Statement, TableConstraint,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

use crate::{BlobSize, Cluster, ColumnDef, ColumnType, Error, IndexDef, Table, TableDef};

/// Why a statement is not a table rndb can create.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DdlError {
    /// Not SQL the parser reads (its message names the line and column).
    #[error("syntax error: {0}")]
    Syntax(String),
    /// Valid SQL outside the subset: the message names the construct.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// Within the subset, but not a valid table (no primary key, an unknown column, a length
    /// out of range...).
    #[error("{0}")]
    Invalid(String),
}

/// A parsed `CREATE TABLE`: the table and the indexes to create on it, in statement order.
#[derive(Clone, Debug, PartialEq)]
pub struct CreateTableStatement {
    pub table: TableDef,
    pub indexes: Vec<IndexDef>,
}

impl CreateTableStatement {
    /// Creates the table, then its indexes. When an index fails, the table is dropped again,
    /// so that nothing half-created is left behind, and the index's error is returned.
    pub fn create(&self, cluster: &Cluster) -> Result<Table, Error> {
        let table = cluster.create_table(&self.table)?;
        for index in &self.indexes {
            if let Err(e) = cluster.create_index(&table, index) {
                let _ = cluster.drop_table(&self.table.name);
                return Err(e);
            }
        }
        Ok(table)
    }
}

/// Parses one `CREATE TABLE` statement (a trailing `;` is allowed) in MySQL's dialect.
pub fn parse_create_table(sql: &str) -> Result<CreateTableStatement, DdlError> {
    let statements =
        Parser::parse_sql(&MySqlDialect {}, sql).map_err(|e| DdlError::Syntax(e.to_string()))?;
    let create = match statements.as_slice() {
        [Statement::CreateTable(create)] => create,
        [] => return Err(DdlError::Invalid("no statement".into())),
        [other] => return Err(DdlError::Unsupported(statement_kind(other))),
        _ => {
            return Err(DdlError::Unsupported(format!(
                "{} statements: give one CREATE TABLE",
                statements.len()
            )))
        }
    };
    check_clauses(create)?;
    let name = object_name(&create.name)?;
    let mut builder = Builder::default();
    for column in &create.columns {
        builder.column(column)?;
    }
    for constraint in &create.constraints {
        builder.constraint(constraint)?;
    }
    let read_backup = table_options(&create.table_options)?;
    builder.finish(name, read_backup)
}

/// The first words of a statement that is not a CREATE TABLE, for the error.
fn statement_kind(statement: &Statement) -> String {
    let text = statement.to_string();
    let words: Vec<&str> = text.split_whitespace().take(2).collect();
    format!("{} (only CREATE TABLE is read)", words.join(" "))
}

/// Refuses the CREATE TABLE clauses outside the subset, naming each.
fn check_clauses(create: &CreateTable) -> Result<(), DdlError> {
    let flags = [
        (create.or_replace, "OR REPLACE"),
        (create.temporary, "TEMPORARY"),
        (create.if_not_exists, "IF NOT EXISTS"),
        (create.external, "EXTERNAL"),
        (create.query.is_some(), "CREATE TABLE ... AS SELECT"),
        (create.like.is_some(), "CREATE TABLE ... LIKE"),
        (create.clone.is_some(), "CLONE"),
        (create.partition_by.is_some(), "PARTITION BY"),
        (
            create.comment.is_some(),
            "a table comment outside the table options",
        ),
    ];
    if let Some((_, clause)) = flags.iter().find(|(set, _)| *set) {
        return Err(DdlError::Unsupported((*clause).to_string()));
    }
    // Every other clause of the many dialects the parser knows: the statement without its
    // name, columns, constraints and options must print as a bare CREATE TABLE.
    let mut rest = create.clone();
    rest.name = ast::ObjectName::from(vec![ast::Ident::new("t")]);
    rest.columns.clear();
    rest.constraints.clear();
    rest.table_options = ast::CreateTableOptions::None;
    let text = rest.to_string();
    if text != "CREATE TABLE t ()" && text != "CREATE TABLE t" {
        return Err(DdlError::Unsupported(format!(
            "a clause in `{text}` (only columns, keys, indexes, ENGINE and COMMENT are read)"
        )));
    }
    Ok(())
}

/// `t` or `db.t`: rndb has one namespace, so a database name is refused rather than dropped.
fn object_name(name: &ast::ObjectName) -> Result<String, DdlError> {
    match name.0.as_slice() {
        [part] => part
            .as_ident()
            .map(|ident| ident.value.clone())
            .ok_or_else(|| DdlError::Unsupported(format!("table name {name}"))),
        _ => Err(DdlError::Unsupported(format!(
            "qualified table name {name} (rndb has one namespace: name the table alone)"
        ))),
    }
}

/// ENGINE=NDB (or NDBCLUSTER) and COMMENT="NDB_TABLE=READ_BACKUP=1" are read; returns the
/// READ_BACKUP option.
fn table_options(options: &ast::CreateTableOptions) -> Result<bool, DdlError> {
    let list = match options {
        ast::CreateTableOptions::None => return Ok(false),
        ast::CreateTableOptions::Plain(list) => list,
        other => return Err(DdlError::Unsupported(format!("table options {other}"))),
    };
    let mut read_backup = false;
    for option in list {
        match option {
            SqlOption::NamedParenthesizedList(engine)
                if engine.key.value.eq_ignore_ascii_case("ENGINE") && engine.values.is_empty() =>
            {
                let name = engine.name.as_ref().map_or("", |n| n.value.as_str());
                if !["NDB", "NDBCLUSTER"]
                    .iter()
                    .any(|e| name.eq_ignore_ascii_case(e))
                {
                    return Err(DdlError::Unsupported(format!(
                        "ENGINE={name} (rndb tables are ENGINE=NDB)"
                    )));
                }
            }
            SqlOption::Comment(CommentDef::WithEq(text) | CommentDef::WithoutEq(text)) => {
                read_backup = ndb_table_comment(text)?;
            }
            other => return Err(DdlError::Unsupported(format!("table option {other}"))),
        }
    }
    Ok(read_backup)
}

/// NDB's table comment `NDB_TABLE=READ_BACKUP=1[,...]`: only READ_BACKUP is read.
fn ndb_table_comment(text: &str) -> Result<bool, DdlError> {
    let Some(settings) = text.strip_prefix("NDB_TABLE=") else {
        return Err(DdlError::Unsupported(format!(
            "COMMENT {text:?} (only NDB_TABLE=READ_BACKUP=0|1 is read)"
        )));
    };
    let mut read_backup = false;
    for setting in settings.split(',') {
        match setting.trim() {
            "READ_BACKUP=1" => read_backup = true,
            "READ_BACKUP=0" => read_backup = false,
            other => {
                return Err(DdlError::Unsupported(format!(
                    "NDB_TABLE option {other:?} (only READ_BACKUP=0|1 is read)"
                )))
            }
        }
    }
    Ok(read_backup)
}

/// What the columns and constraints say, gathered in statement order.
#[derive(Debug, Default)]
struct Builder {
    columns: Vec<ColumnDef>,
    /// Columns given NOT NULL or NULL explicitly (the rest are nullable unless in the key).
    explicit_null: Vec<Option<bool>>,
    /// Columns given DEFAULT NULL (which may not be in the primary key).
    explicit_default_null: Vec<bool>,
    primary_key: Option<Vec<String>>,
    /// (name, unique, columns); names are filled in at the end for unnamed ones.
    indexes: Vec<(Option<String>, bool, Vec<String>)>,
}

impl Builder {
    fn column(&mut self, column: &ast::ColumnDef) -> Result<(), DdlError> {
        let name = column.name.value.clone();
        let (column_type, elements) = typed_column(&name, &column.data_type)?;
        let mut null = None;
        let mut default_null = false;
        let mut auto_increment = false;
        for option in &column.options {
            match &option.option {
                ColumnOption::Null => null = Some(true),
                ColumnOption::NotNull => null = Some(false),
                ColumnOption::PrimaryKey(_) => self.set_primary_key(vec![name.clone()])?,
                ColumnOption::Unique(_) => self.indexes.push((None, true, vec![name.clone()])),
                // mysqldump writes it on every nullable column; it is what a NULL column does.
                ColumnOption::Default(value) if value.to_string().eq_ignore_ascii_case("NULL") => {
                    default_null = true
                }
                // The MySQL dialect's own option (the parser keeps its tokens).
                other if other.to_string().eq_ignore_ascii_case("AUTO_INCREMENT") => {
                    auto_increment = true
                }
                other => {
                    return Err(DdlError::Unsupported(format!(
                        "column option {other} (column {name})"
                    )))
                }
            }
        }
        if default_null && null == Some(false) {
            return Err(DdlError::Invalid(format!(
                "Invalid default value for '{name}' (DEFAULT NULL on a NOT NULL column)"
            )));
        }
        self.explicit_default_null.push(default_null);
        self.columns.push(ColumnDef {
            name,
            column_type,
            nullable: false,
            primary_key: false,
            auto_increment,
            elements,
        });
        self.explicit_null.push(null);
        Ok(())
    }

    fn constraint(&mut self, constraint: &TableConstraint) -> Result<(), DdlError> {
        match constraint {
            TableConstraint::PrimaryKey(key) => {
                no_index_options(&key.index_options, "PRIMARY KEY")?;
                self.set_primary_key(column_names(&key.columns)?)
            }
            TableConstraint::Unique(unique) => {
                no_index_options(&unique.index_options, "UNIQUE")?;
                let name = unique.index_name.as_ref().or(unique.name.as_ref());
                let columns = column_names(&unique.columns)?;
                self.indexes
                    .push((name.map(|n| n.value.clone()), true, columns));
                Ok(())
            }
            TableConstraint::Index(index) => {
                no_index_options(&index.index_options, "INDEX")?;
                let columns = column_names(&index.columns)?;
                self.indexes
                    .push((index.name.as_ref().map(|n| n.value.clone()), false, columns));
                Ok(())
            }
            TableConstraint::ForeignKey(_) => Err(DdlError::Unsupported("FOREIGN KEY".into())),
            TableConstraint::Check(_) => Err(DdlError::Unsupported("CHECK".into())),
            other => Err(DdlError::Unsupported(format!("constraint {other}"))),
        }
    }

    fn set_primary_key(&mut self, columns: Vec<String>) -> Result<(), DdlError> {
        if self.primary_key.is_some() {
            return Err(DdlError::Invalid("Multiple primary key defined".into()));
        }
        self.primary_key = Some(columns);
        Ok(())
    }

    fn finish(mut self, name: String, read_backup: bool) -> Result<CreateTableStatement, DdlError> {
        let key = self
            .primary_key
            .take()
            .ok_or_else(|| DdlError::Invalid(format!("table {name} has no PRIMARY KEY")))?;
        for key_column in &key {
            let column = self.find(key_column)?;
            if self.explicit_null[column] == Some(true) || self.explicit_default_null[column] {
                return Err(DdlError::Invalid(format!(
                    "primary key column {key_column} cannot be NULL"
                )));
            }
            self.columns[column].primary_key = true;
        }
        for (column, null) in self.columns.iter_mut().zip(&self.explicit_null) {
            column.nullable = !column.primary_key && null.unwrap_or(true);
        }
        let mut indexes: Vec<IndexDef> = Vec::new();
        for (index_name, unique, columns) in std::mem::take(&mut self.indexes) {
            for column in &columns {
                self.find(column)?;
            }
            let index_name = index_name.unwrap_or_else(|| unused_name(&indexes, &columns[0]));
            if indexes.iter().any(|i| i.name == index_name) {
                return Err(DdlError::Invalid(format!(
                    "Duplicate key name '{index_name}'"
                )));
            }
            let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
            indexes.push(if unique {
                IndexDef::unique(&index_name, &columns)
            } else {
                IndexDef::ordered(&index_name, &columns)
            });
        }
        let table = TableDef::new(&name, self.columns).with_read_backup(read_backup);
        table.validate().map_err(|(code, message)| {
            let error = rndb_protocol::NdbError::with_detail(code, message);
            DdlError::Invalid(format!("{} (NDB error {code})", error.message))
        })?;
        Ok(CreateTableStatement { table, indexes })
    }

    fn find(&self, column: &str) -> Result<usize, DdlError> {
        self.columns
            .iter()
            .position(|c| c.name == column)
            .ok_or_else(|| {
                DdlError::Invalid(format!("Key column '{column}' doesn't exist in table"))
            })
    }
}

/// MySQL's name for an unnamed index: its first column, then `_2`, `_3`... when taken.
fn unused_name(indexes: &[IndexDef], first_column: &str) -> String {
    let taken = |name: &str| indexes.iter().any(|i| i.name == name);
    if !taken(first_column) {
        return first_column.to_string();
    }
    (2..)
        .map(|n| format!("{first_column}_{n}"))
        .find(|name| !taken(name))
        .unwrap_or_default()
}

fn no_index_options(options: &[ast::IndexOption], what: &str) -> Result<(), DdlError> {
    match options.first() {
        None => Ok(()),
        Some(option) => Err(DdlError::Unsupported(format!("{what} option {option}"))),
    }
}

/// Plain column names: an expression, a prefix length or ASC/DESC is refused.
fn column_names(columns: &[IndexColumn]) -> Result<Vec<String>, DdlError> {
    columns
        .iter()
        .map(|column| match &column.column.expr {
            Expr::Identifier(ident) if column.column.options.sort.is_none() => {
                Ok(ident.value.clone())
            }
            _ => Err(DdlError::Unsupported(format!(
                "index part {} (name a column)",
                column.column
            ))),
        })
        .collect()
}

/// A DATETIME's or TIMESTAMP's fraction digits: 0 unless given, at most 6 (MySQL's limit).
fn fraction_digits(column: &str, fsp: Option<u64>) -> Result<u8, DdlError> {
    match fsp.unwrap_or(0) {
        n @ 0..=6 => Ok(n as u8),
        n => Err(DdlError::Invalid(format!(
            "column {column}: {n} fraction digits, at most 6"
        ))),
    }
}

/// The rndb type of a MySQL type, and an ENUM's or SET's names (none for the other types).
fn typed_column(name: &str, data_type: &DataType) -> Result<(ColumnType, Vec<String>), DdlError> {
    match data_type {
        DataType::Enum(members, None) => {
            let names = members
                .iter()
                .map(|m| match m {
                    ast::EnumMember::Name(e) => Ok(element_name(e)),
                    other => Err(DdlError::Unsupported(format!(
                        "ENUM element {other:?} (column {name}): names only"
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let n = u16::try_from(names.len()).map_err(|_| {
                DdlError::Invalid(format!("column {name}: ENUM of at most 65535 elements"))
            })?;
            Ok((ColumnType::Enum(n), names))
        }
        DataType::Set(members) => {
            let n = u8::try_from(members.len())
                .ok()
                .filter(|n| *n <= rndb_protocol::schema::BIT_MAX)
                .ok_or_else(|| {
                    DdlError::Invalid(format!(
                        "Too many strings for column {name} and SET (at most 64)"
                    ))
                })?;
            Ok((
                ColumnType::Set(n),
                members.iter().map(|m| element_name(m)).collect(),
            ))
        }
        other => Ok((column_type(name, other)?, Vec::new())),
    }
}

/// An ENUM element's or SET member's name as MySQL keeps it: without trailing spaces.
fn element_name(name: &str) -> String {
    name.trim_end_matches(' ').to_string()
}

/// A BINARY's length (the data node checks the range, 738).
fn fixed_length(column: &str, length: u64) -> Result<u16, DdlError> {
    u16::try_from(length)
        .map_err(|_| DdlError::Invalid(format!("column {column}: length {length} is over 65535")))
}

/// The rndb type of a MySQL type.
fn column_type(column: &str, data_type: &DataType) -> Result<ColumnType, DdlError> {
    let length = |length: &Option<CharacterLength>| match length {
        Some(CharacterLength::IntegerLength { length, unit: None }) => u16::try_from(*length)
            .map_err(|_| {
                DdlError::Invalid(format!("column {column}: length {length} is over 65535"))
            }),
        _ => Err(DdlError::Unsupported(format!(
            "{data_type} (column {column}: give a length in bytes)"
        ))),
    };
    match data_type {
        DataType::TinyInt(_) => Ok(ColumnType::Int8),
        DataType::TinyIntUnsigned(_) => Ok(ColumnType::UInt8),
        DataType::SmallInt(_) => Ok(ColumnType::Int16),
        DataType::SmallIntUnsigned(_) => Ok(ColumnType::UInt16),
        DataType::MediumInt(_) => Ok(ColumnType::Int24),
        DataType::MediumIntUnsigned(_) => Ok(ColumnType::UInt24),
        DataType::Int(_) | DataType::Integer(_) => Ok(ColumnType::Int32),
        DataType::IntUnsigned(_) | DataType::IntegerUnsigned(_) => Ok(ColumnType::UInt32),
        DataType::BigInt(_) => Ok(ColumnType::Int64),
        DataType::BigIntUnsigned(_) => Ok(ColumnType::UInt64),
        DataType::Double(ast::ExactNumberInfo::None)
        | DataType::DoublePrecision
        | DataType::Real => Ok(ColumnType::Float64),
        // MySQL: FLOAT(p) is a single up to 24 bits of precision, a double past it.
        DataType::Float(ast::ExactNumberInfo::None) | DataType::Float4 => Ok(ColumnType::Float32),
        DataType::Float(ast::ExactNumberInfo::Precision(p)) if *p <= 24 => Ok(ColumnType::Float32),
        DataType::Float(ast::ExactNumberInfo::Precision(p)) if *p <= 53 => Ok(ColumnType::Float64),
        DataType::Varchar(n) => Ok(ColumnType::Varchar(length(n)?)),
        DataType::Char(None) | DataType::Character(None) => Ok(ColumnType::Char(1)),
        DataType::Char(n) | DataType::Character(n) => Ok(ColumnType::Char(length(n)?)),
        DataType::Binary(n) => Ok(ColumnType::Binary(fixed_length(column, n.unwrap_or(1))?)),
        DataType::Bit(n) => Ok(ColumnType::Bit(u8::try_from(n.unwrap_or(1)).map_err(
            |_| DdlError::Invalid(format!("column {column}: BIT of at most 64 bits")),
        )?)),
        DataType::Decimal(info) | DataType::Numeric(info) | DataType::Dec(info) => {
            // MySQL's default is DECIMAL(10, 0), and DECIMAL(0) and DECIMAL(0,0) are that too
            // (my_decimal_trim); the data node checks the ranges (738).
            let (p, s) = match info {
                ast::ExactNumberInfo::None
                | ast::ExactNumberInfo::Precision(0)
                | ast::ExactNumberInfo::PrecisionAndScale(0, 0) => (10, 0),
                ast::ExactNumberInfo::Precision(p) => (*p, 0),
                ast::ExactNumberInfo::PrecisionAndScale(p, s) => (*p, *s),
            };
            let digits = |n: i128| {
                u8::try_from(n).map_err(|_| {
                    DdlError::Invalid(format!("column {column}: DECIMAL({p},{s}) is out of range"))
                })
            };
            let (p, s) = (digits(p.into())?, digits(s.into())?);
            Ok(ColumnType::Decimal(p, s))
        }
        DataType::Time(fsp, ast::TimezoneInfo::None) => {
            Ok(ColumnType::Time(fraction_digits(column, *fsp)?))
        }
        DataType::Custom(name, modifiers)
            if modifiers.is_empty() && name.to_string().eq_ignore_ascii_case("YEAR") =>
        {
            Ok(ColumnType::Year)
        }
        // MySQL's BLOB(M) is the smallest BLOB type that holds M bytes.
        DataType::Blob(m) => Ok(ColumnType::Blob(match m {
            None => BlobSize::Blob,
            Some(m) => [
                BlobSize::Tiny,
                BlobSize::Blob,
                BlobSize::Medium,
                BlobSize::Long,
            ]
            .into_iter()
            .find(|size| *m <= size.max_bytes())
            .ok_or_else(|| {
                DdlError::Invalid(format!("column {column}: BLOB({m}) is past LONGBLOB"))
            })?,
        })),
        DataType::TinyBlob => Ok(ColumnType::Blob(BlobSize::Tiny)),
        DataType::MediumBlob => Ok(ColumnType::Blob(BlobSize::Medium)),
        DataType::LongBlob => Ok(ColumnType::Blob(BlobSize::Long)),
        DataType::Text => Ok(ColumnType::Text(BlobSize::Blob)),
        DataType::TinyText => Ok(ColumnType::Text(BlobSize::Tiny)),
        DataType::MediumText => Ok(ColumnType::Text(BlobSize::Medium)),
        DataType::LongText => Ok(ColumnType::Text(BlobSize::Long)),
        DataType::JSON => Ok(ColumnType::Json),
        DataType::Date => Ok(ColumnType::Date),
        DataType::Datetime(fsp) => Ok(ColumnType::Datetime(fraction_digits(column, *fsp)?)),
        DataType::Timestamp(fsp, ast::TimezoneInfo::None) => {
            Ok(ColumnType::Timestamp(fraction_digits(column, *fsp)?))
        }
        DataType::Varbinary(Some(ast::BinaryLength::IntegerLength { length })) => {
            u16::try_from(*length)
                .map(ColumnType::Varbinary)
                .map_err(|_| {
                    DdlError::Invalid(format!("column {column}: length {length} is over 65535"))
                })
        }
        other => Err(DdlError::Unsupported(format!(
            "type {other} (column {column}; rndb has TINYINT, SMALLINT, MEDIUMINT, INT and \
             BIGINT [UNSIGNED], FLOAT, DOUBLE, DECIMAL(p,s), CHAR(n), VARCHAR(n), BINARY(n), \
             VARBINARY(n), BIT(n), YEAR, DATE, TIME(fsp), DATETIME(fsp), TIMESTAMP(fsp), \
             TINY/MEDIUM/LONG BLOB and TEXT, JSON, ENUM, SET)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `sql` and compares the columns (as `name type flags`) and indexes with `expected`.
    fn check(sql: &str, expected: &[&str]) {
        let statement = match parse_create_table(sql) {
            Ok(statement) => statement,
            Err(e) => panic!("{sql}: {e}"),
        };
        let mut got: Vec<String> = statement
            .table
            .columns
            .iter()
            .map(|c| {
                let flags = match (c.primary_key, c.nullable) {
                    (true, _) => "PK",
                    (false, true) => "NULL",
                    (false, false) => "NOT NULL",
                };
                format!("{} {} {flags}", c.name, c.column_type)
            })
            .collect();
        got.extend(
            statement
                .indexes
                .iter()
                .map(|i| format!("{:?} {} ({})", i.kind, i.name, i.columns.join(", "))),
        );
        assert_eq!(got, expected, "{sql}");
    }

    /// Parses `sql`, expects an error whose message contains `needle`.
    fn check_error(sql: &str, needle: &str) {
        match parse_create_table(sql) {
            Ok(statement) => panic!("{sql}: parsed as {statement:?}"),
            Err(e) => assert!(e.to_string().contains(needle), "{sql}: {e}"),
        }
    }

    #[test]
    fn the_subset() {
        check(
            "CREATE TABLE t (id INT UNSIGNED NOT NULL PRIMARY KEY, name VARCHAR(32), \
             n BIGINT NOT NULL, u BIGINT UNSIGNED NULL, x DOUBLE, b VARBINARY(8), i INTEGER, \
             UNIQUE (name), INDEX (n), KEY by_u (u, n), UNIQUE KEY ub (b));",
            &[
                "id UInt32 PK",
                "name Varchar(32) NULL",
                "n Int64 NOT NULL",
                "u UInt64 NULL",
                "x Float64 NULL",
                "b Varbinary(8) NULL",
                "i Int32 NULL",
                "Unique name (name)",
                "Ordered n (n)",
                "Ordered by_u (u, n)",
                "Unique ub (b)",
            ],
        );
    }

    #[test]
    fn small_integers() {
        check(
            "CREATE TABLE s (a TINYINT PRIMARY KEY, b TINYINT UNSIGNED, c SMALLINT(5), \
             d SMALLINT UNSIGNED, e MEDIUMINT, f MEDIUMINT UNSIGNED NOT NULL)",
            &[
                "a Int8 PK",
                "b UInt8 NULL",
                "c Int16 NULL",
                "d UInt16 NULL",
                "e Int24 NULL",
                "f UInt24 NOT NULL",
            ],
        );
    }

    /// ENUM and SET keep their names (trailing spaces dropped, as MySQL does); a SET of more
    /// than 64 members is refused; JSON is a type of its own.
    #[test]
    fn enums_sets_and_json() {
        let sql = "CREATE TABLE s (size ENUM('small', 'big ') NOT NULL PRIMARY KEY, \
                   tags SET('a','it''s'))";
        check(sql, &["size Enum(2) PK", "tags Set(2) NULL"]);
        check(
            "CREATE TABLE j (id INT PRIMARY KEY, doc JSON NOT NULL)",
            &["id Int32 PK", "doc Json NOT NULL"],
        );
        let statement = parse_create_table(sql).expect("parses");
        let names = |c: usize| statement.table.columns[c].elements.clone();
        assert_eq!(names(0), ["small", "big"]);
        assert_eq!(names(1), ["a", "it's"]);
        let members: Vec<String> = (0..65).map(|i| format!("'m{i}'")).collect();
        check_error(
            &format!(
                "CREATE TABLE s (id INT PRIMARY KEY, t SET({}))",
                members.join(",")
            ),
            "Too many strings for column t and SET",
        );
    }

    #[test]
    fn blobs_and_texts() {
        check(
            "CREATE TABLE b (id INT PRIMARY KEY, a TINYBLOB, b BLOB, c BLOB(70000), \
             d MEDIUMBLOB, e LONGBLOB, f TINYTEXT, g TEXT NOT NULL, h MEDIUMTEXT, i LONGTEXT, \
             j BLOB(255))",
            &[
                "id Int32 PK",
                "a Blob(256,0,0) NULL",
                "b Blob(256,2000,0) NULL",
                "c Blob(256,4000,0) NULL",
                "d Blob(256,4000,0) NULL",
                "e Blob(256,8000,0) NULL",
                "f Text(256,0,0) NULL",
                "g Text(256,2000,0) NOT NULL",
                "h Text(256,4000,0) NULL",
                "i Text(256,8000,0) NULL",
                "j Blob(256,0,0) NULL",
            ],
        );
    }

    #[test]
    fn dates_and_times() {
        check(
            "CREATE TABLE e (d DATE PRIMARY KEY, t DATETIME, t3 DATETIME(3), s TIMESTAMP(6) NULL)",
            &[
                "d Date PK",
                "t Datetime(0) NULL",
                "t3 Datetime(3) NULL",
                "s Timestamp(6) NULL",
            ],
        );
        check_error(
            "CREATE TABLE e (d DATE PRIMARY KEY, t DATETIME(7))",
            "7 fraction digits, at most 6",
        );
    }

    #[test]
    fn float_char_binary_bit_and_year() {
        check(
            "CREATE TABLE f (c CHAR(4) PRIMARY KEY, c1 CHAR, b BINARY(3), b1 BINARY, f FLOAT, \
             f24 FLOAT(24), f25 FLOAT(25), r DOUBLE, d REAL, bits BIT(5), bit1 BIT, y YEAR)",
            &[
                "c Char(4) PK",
                "c1 Char(1) NULL",
                "b Binary(3) NULL",
                "b1 Binary(1) NULL",
                "f Float32 NULL",
                "f24 Float32 NULL",
                "f25 Float64 NULL",
                "r Float64 NULL",
                "d Float64 NULL",
                "bits Bit(5) NULL",
                "bit1 Bit(1) NULL",
                "y Year NULL",
            ],
        );
        check(
            "CREATE TABLE m (d DECIMAL(12, 2) PRIMARY KEY, n NUMERIC, e DEC(5), t TIME, t6 TIME(6))",
            &[
                "d Decimal(12,2) PK",
                "n Decimal(10,0) NULL",
                "e Decimal(5,0) NULL",
                "t Time(0) NULL",
                "t6 Time(6) NULL",
            ],
        );
    }

    #[test]
    fn decimal_of_zero_digits_is_mysqls_default() {
        // MySQL (my_decimal_trim): DECIMAL(0) and DECIMAL(0,0) are DECIMAL(10,0).
        check(
            "CREATE TABLE z (a DECIMAL(0) PRIMARY KEY, b DECIMAL(0,0), c NUMERIC(0))",
            &[
                "a Decimal(10,0) PK",
                "b Decimal(10,0) NULL",
                "c Decimal(10,0) NULL",
            ],
        );
    }

    #[test]
    fn composite_key_engine_and_read_backup() {
        let sql = "create table t2 (a int, b varchar(4), c double precision unique, \
                   primary key (a, b)) ENGINE=NDBCLUSTER COMMENT='NDB_TABLE=READ_BACKUP=1'";
        check(
            sql,
            &[
                "a Int32 PK",
                "b Varchar(4) PK",
                "c Float64 NULL",
                "Unique c (c)",
            ],
        );
        let statement = parse_create_table(sql).expect("parse");
        assert!(statement.table.read_backup);
        assert_eq!(statement.table.name, "t2");
    }

    #[test]
    fn mysqldump_default_null() {
        check(
            "CREATE TABLE t (id INT NOT NULL, v VARCHAR(4) DEFAULT NULL, PRIMARY KEY (id)) \
             ENGINE=ndbcluster",
            &["id Int32 PK", "v Varchar(4) NULL"],
        );
        check_error(
            "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL DEFAULT NULL)",
            "Invalid default value for 'v'",
        );
        check_error(
            "CREATE TABLE t (id INT DEFAULT NULL, PRIMARY KEY (id))",
            "primary key column id cannot be NULL",
        );
    }

    #[test]
    fn auto_increment() {
        let statement = parse_create_table(
            "CREATE TABLE t (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, v INT, PRIMARY KEY (id))",
        )
        .expect("parse");
        let flags: Vec<bool> = statement
            .table
            .columns
            .iter()
            .map(|c| c.auto_increment)
            .collect();
        assert_eq!(flags, [true, false]);
        check_error(
            "CREATE TABLE t (id INT PRIMARY KEY AUTO_INCREMENT, b INT AUTO_INCREMENT)",
            "NDB error 4335",
        );
        check_error(
            "CREATE TABLE t (id INT PRIMARY KEY, d DOUBLE AUTO_INCREMENT)",
            "NDB error 4335",
        );
    }

    #[test]
    fn unnamed_indexes_on_one_column_get_numbered() {
        check(
            "CREATE TABLE t (id INT PRIMARY KEY, a INT, INDEX (a), UNIQUE (a))",
            &[
                "id Int32 PK",
                "a Int32 NULL",
                "Ordered a (a)",
                "Unique a_2 (a)",
            ],
        );
    }

    #[test]
    fn refusals_name_the_construct() {
        let cases = [
            (
                "CREATE TABLE t (id INT PRIMARY KEY, s GEOMETRY)",
                "type GEOMETRY (column s",
            ),
            (
                "CREATE TABLE t (id INT PRIMARY KEY, d DECIMAL(10, 2) UNSIGNED)",
                "type DECIMAL(10,2) UNSIGNED (column d",
            ),
            (
                "CREATE TABLE t (id INT PRIMARY KEY, c FLOAT(54))",
                "type FLOAT(54)",
            ),
            (
                "CREATE TABLE t (id INT PRIMARY KEY, a INT DEFAULT 3)",
                "DEFAULT 3 (column a)",
            ),
            (
                "CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY)",
                "IF NOT EXISTS",
            ),
            ("CREATE TEMPORARY TABLE t (id INT PRIMARY KEY)", "TEMPORARY"),
            (
                "CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB",
                "ENGINE=InnoDB",
            ),
            (
                "CREATE TABLE db.t (id INT PRIMARY KEY)",
                "qualified table name db.t",
            ),
            (
                "CREATE TABLE t (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES u (id))",
                "FOREIGN KEY",
            ),
            (
                "CREATE TABLE t (id INT PRIMARY KEY, CHECK (id > 0))",
                "CHECK",
            ),
            ("DROP TABLE t", "DROP TABLE (only CREATE TABLE is read)"),
            (
                "CREATE TABLE t (id INT PRIMARY KEY); CREATE TABLE u (id INT PRIMARY KEY)",
                "2 statements",
            ),
            (
                "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10 CHARACTERS))",
                "VARCHAR(10 CHARACTERS)",
            ),
            (
                "CREATE TABLE t (id INT PRIMARY KEY, INDEX (id DESC))",
                "index part id DESC",
            ),
        ];
        for (sql, needle) in cases {
            check_error(sql, needle);
        }
    }

    #[test]
    fn invalid_tables() {
        check_error("CREATE TABLE t (a INT)", "table t has no PRIMARY KEY");
        check_error("CREATE TABLE t (a INT NULL PRIMARY KEY)", "cannot be NULL");
        check_error(
            "CREATE TABLE t (a INT PRIMARY KEY, INDEX (b))",
            "Key column 'b'",
        );
        check_error(
            "CREATE TABLE t (a INT PRIMARY KEY, b INT, PRIMARY KEY (b))",
            "Multiple primary key",
        );
        check_error("CREATE TABLE t (a INT PRIMARY KEY, a INT)", "used twice");
        check_error(
            "CREATE TABLE t (a INT PRIMARY KEY, v VARCHAR(70000))",
            "over 65535",
        );
        check_error(
            "CREATE TABLE t (a INT PRIMARY KEY, INDEX i (a), UNIQUE i (a))",
            "Duplicate key name 'i'",
        );
        check_error("CREATE TABLE t (a INT PRIMARY KEY", "syntax error");
        check_error("", "no statement");
    }
}
