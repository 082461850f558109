//! Values as both backends store them: integer, real, text, blob or null.

use postgres::types::{IsNull, Type};
use rusqlite::types::{ToSqlOutput, ValueRef};

/// A value's kind (and a null's: PostgreSQL is told every parameter's type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A 64-bit integer (`INTEGER`, `BIGINT`).
    Int,
    /// A double (`REAL`, `DOUBLE PRECISION`).
    Real,
    /// UTF-8 text.
    Text,
    /// Bytes (`BLOB`, `BYTEA`).
    Blob,
}

impl Kind {
    /// PostgreSQL's type for it.
    pub fn pg_type(self) -> Type {
        match self {
            Kind::Int => Type::INT8,
            Kind::Real => Type::FLOAT8,
            Kind::Text => Type::TEXT,
            Kind::Blob => Type::BYTEA,
        }
    }
}

/// A parameter, borrowed from its source.
#[derive(Debug, Clone, Copy)]
pub enum Param<'a> {
    /// Null of a kind.
    Null(Kind),
    /// An integer.
    Int(i64),
    /// A double.
    Real(f64),
    /// Text.
    Text(&'a str),
    /// Bytes.
    Blob(&'a [u8]),
}

impl Param<'_> {
    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Param::Null(k) => *k,
            Param::Int(_) => Kind::Int,
            Param::Real(_) => Kind::Real,
            Param::Text(_) => Kind::Text,
            Param::Blob(_) => Kind::Blob,
        }
    }
}

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Param::Null(_) => ValueRef::Null,
            Param::Int(i) => ValueRef::Integer(i),
            Param::Real(r) => ValueRef::Real(r),
            Param::Text(t) => ValueRef::Text(t.as_bytes()),
            Param::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

impl postgres::types::ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match *self {
            Param::Null(_) => Ok(IsNull::Yes),
            Param::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(i)?.to_sql(ty, out),
                Type::BOOL => (i != 0).to_sql(ty, out),
                Type::FLOAT8 => (i as f64).to_sql(ty, out),
                _ => Err(format!("an integer cannot be a {ty}").into()),
            },
            Param::Real(r) => r.to_sql(ty, out),
            Param::Text(t) => t.to_sql(ty, out),
            Param::Blob(b) => b.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

/// What can be a parameter.
pub trait ToSql {
    /// As a parameter.
    fn to_param(&self) -> Param<'_>;
}

impl<T: ToSql + ?Sized> ToSql for &T {
    fn to_param(&self) -> Param<'_> {
        (**self).to_param()
    }
}

macro_rules! int_param {
    ($($t:ty)*) => {$(
        impl ToSql for $t {
            fn to_param(&self) -> Param<'_> {
                Param::Int(*self as i64)
            }
        }
        impl NullKind for $t {
            const KIND: Kind = Kind::Int;
        }
    )*};
}
int_param!(i64 i32 u32 u16 u8 i16 usize u64);

impl ToSql for bool {
    fn to_param(&self) -> Param<'_> {
        Param::Int(i64::from(*self))
    }
}
impl NullKind for bool {
    const KIND: Kind = Kind::Int;
}

impl ToSql for f64 {
    fn to_param(&self) -> Param<'_> {
        Param::Real(*self)
    }
}
impl NullKind for f64 {
    const KIND: Kind = Kind::Real;
}

impl ToSql for str {
    fn to_param(&self) -> Param<'_> {
        Param::Text(self)
    }
}
impl NullKind for str {
    const KIND: Kind = Kind::Text;
}

impl ToSql for String {
    fn to_param(&self) -> Param<'_> {
        Param::Text(self)
    }
}
impl NullKind for String {
    const KIND: Kind = Kind::Text;
}

impl ToSql for [u8] {
    fn to_param(&self) -> Param<'_> {
        Param::Blob(self)
    }
}

impl ToSql for Vec<u8> {
    fn to_param(&self) -> Param<'_> {
        Param::Blob(self)
    }
}
impl NullKind for Vec<u8> {
    const KIND: Kind = Kind::Blob;
}

/// The kind of a type's null.
pub trait NullKind {
    /// Its kind.
    const KIND: Kind;
}

impl<T: NullKind + ?Sized> NullKind for &T {
    const KIND: Kind = T::KIND;
}

impl<T: ToSql + NullKind> ToSql for Option<T> {
    fn to_param(&self) -> Param<'_> {
        match self {
            Some(v) => v.to_param(),
            None => Param::Null(T::KIND),
        }
    }
}

/// An owned value (a row read whole, or a parameter built at run time).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Null (of no particular kind: bound as text).
    Null,
    /// An integer.
    Integer(i64),
    /// A double.
    Real(f64),
    /// Text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

impl ToSql for Value {
    fn to_param(&self) -> Param<'_> {
        match self {
            Value::Null => Param::Null(Kind::Text),
            Value::Integer(i) => Param::Int(*i),
            Value::Real(r) => Param::Real(*r),
            Value::Text(t) => Param::Text(t),
            Value::Blob(b) => Param::Blob(b),
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Integer(v)
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}

impl From<Option<String>> for Value {
    fn from(v: Option<String>) -> Value {
        v.map_or(Value::Null, Value::Text)
    }
}

/// What a column can be read as.
pub trait FromSql: Sized {
    /// From SQLite's value.
    fn from_sqlite(v: ValueRef<'_>) -> Result<Self, String>;
    /// From column `i` of a PostgreSQL row.
    fn from_pg(row: &postgres::Row, i: usize) -> Result<Self, String>;
    /// From an owned value.
    fn from_value(v: &Value) -> Result<Self, String>;
}

/// An integer, a boolean or a null, as PostgreSQL sends them.
struct PgInt(Option<i64>);

impl<'a> postgres::types::FromSql<'a> for PgInt {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(PgInt(Some(match *ty {
            Type::INT8 => i64::from_sql(ty, raw)?,
            Type::INT4 => i64::from(i32::from_sql(ty, raw)?),
            Type::INT2 => i64::from(i16::from_sql(ty, raw)?),
            Type::OID => i64::from(u32::from_sql(ty, raw)?),
            Type::BOOL => i64::from(bool::from_sql(ty, raw)?),
            _ => return Err(format!("{ty} is not an integer").into()),
        })))
    }

    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(PgInt(None))
    }

    fn accepts(ty: &Type) -> bool {
        matches!(
            *ty,
            Type::INT8 | Type::INT4 | Type::INT2 | Type::OID | Type::BOOL
        )
    }
}

fn pg_get<'a, T: postgres::types::FromSql<'a>>(
    row: &'a postgres::Row,
    i: usize,
) -> Result<T, String> {
    row.try_get::<usize, T>(i).map_err(|e| e.to_string())
}

/// Read a nullable column, then insist on a value.
fn present<T>(v: Option<T>) -> Result<T, String> {
    v.ok_or_else(|| "is null".to_string())
}

impl FromSql for i64 {
    fn from_sqlite(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Integer(i) => Ok(i),
            other => Err(format!("{:?} is not an integer", other.data_type())),
        }
    }
    fn from_pg(row: &postgres::Row, i: usize) -> Result<Self, String> {
        present(pg_get::<PgInt>(row, i)?.0)
    }
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Integer(i) => Ok(*i),
            other => Err(format!("{other:?} is not an integer")),
        }
    }
}

macro_rules! int_from {
    ($($t:ty)*) => {$(
        impl FromSql for $t {
            fn from_sqlite(v: ValueRef<'_>) -> Result<Self, String> {
                let i = i64::from_sqlite(v)?;
                <$t>::try_from(i).map_err(|_| format!("{i} is out of range"))
            }
            fn from_pg(row: &postgres::Row, i: usize) -> Result<Self, String> {
                let n = i64::from_pg(row, i)?;
                <$t>::try_from(n).map_err(|_| format!("{n} is out of range"))
            }
            fn from_value(v: &Value) -> Result<Self, String> {
                let i = i64::from_value(v)?;
                <$t>::try_from(i).map_err(|_| format!("{i} is out of range"))
            }
        }
    )*};
}
int_from!(i32 u32 u64 usize u16 u8);

impl FromSql for bool {
    fn from_sqlite(v: ValueRef<'_>) -> Result<Self, String> {
        Ok(i64::from_sqlite(v)? != 0)
    }
    fn from_pg(row: &postgres::Row, i: usize) -> Result<Self, String> {
        Ok(i64::from_pg(row, i)? != 0)
    }
    fn from_value(v: &Value) -> Result<Self, String> {
        Ok(i64::from_value(v)? != 0)
    }
}

impl FromSql for f64 {
    fn from_sqlite(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Real(r) => Ok(r),
            ValueRef::Integer(i) => Ok(i as f64),
            other => Err(format!("{:?} is not a number", other.data_type())),
        }
    }
    fn from_pg(row: &postgres::Row, i: usize) -> Result<Self, String> {
        match row.columns().get(i).map(|c| c.type_().clone()) {
            Some(Type::FLOAT4) => present(pg_get::<Option<f32>>(row, i)?).map(f64::from),
            Some(Type::FLOAT8) => present(pg_get::<Option<f64>>(row, i)?),
            _ => i64::from_pg(row, i).map(|n| n as f64),
        }
    }
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Real(r) => Ok(*r),
            Value::Integer(i) => Ok(*i as f64),
            other => Err(format!("{other:?} is not a number")),
        }
    }
}

impl FromSql for String {
    fn from_sqlite(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Text(t) => std::str::from_utf8(t)
                .map(str::to_string)
                .map_err(|e| e.to_string()),
            other => Err(format!("{:?} is not text", other.data_type())),
        }
    }
    fn from_pg(row: &postgres::Row, i: usize) -> Result<Self, String> {
        present(pg_get::<Option<String>>(row, i)?)
    }
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Text(t) => Ok(t.clone()),
            other => Err(format!("{other:?} is not text")),
        }
    }
}

impl FromSql for Vec<u8> {
    fn from_sqlite(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Blob(b) => Ok(b.to_vec()),
            ValueRef::Text(t) => Ok(t.to_vec()),
            other => Err(format!("{:?} is not a blob", other.data_type())),
        }
    }
    fn from_pg(row: &postgres::Row, i: usize) -> Result<Self, String> {
        present(pg_get::<Option<Vec<u8>>>(row, i)?)
    }
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Blob(b) => Ok(b.clone()),
            Value::Text(t) => Ok(t.as_bytes().to_vec()),
            other => Err(format!("{other:?} is not a blob")),
        }
    }
}

impl<T: FromSql> FromSql for Option<T> {
    fn from_sqlite(v: ValueRef<'_>) -> Result<Self, String> {
        match v {
            ValueRef::Null => Ok(None),
            other => T::from_sqlite(other).map(Some),
        }
    }
    fn from_pg(row: &postgres::Row, i: usize) -> Result<Self, String> {
        if is_pg_null(row, i) {
            return Ok(None);
        }
        T::from_pg(row, i).map(Some)
    }
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// Whether column `i` is null (whatever its type).
fn is_pg_null(row: &postgres::Row, i: usize) -> bool {
    struct Nullness(bool);
    impl<'a> postgres::types::FromSql<'a> for Nullness {
        fn from_sql(
            _: &Type,
            _: &'a [u8],
        ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
            Ok(Nullness(false))
        }
        fn from_sql_null(_: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
            Ok(Nullness(true))
        }
        fn accepts(_: &Type) -> bool {
            true
        }
    }
    row.try_get::<usize, Nullness>(i)
        .map(|n| n.0)
        .unwrap_or(false)
}

impl FromSql for Value {
    fn from_sqlite(v: ValueRef<'_>) -> Result<Self, String> {
        Ok(match v {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Integer(i),
            ValueRef::Real(r) => Value::Real(r),
            ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        })
    }
    fn from_pg(row: &postgres::Row, i: usize) -> Result<Self, String> {
        if is_pg_null(row, i) {
            return Ok(Value::Null);
        }
        let ty = row
            .columns()
            .get(i)
            .map(|c| c.type_().clone())
            .ok_or_else(|| format!("no column {i}"))?;
        Ok(match ty {
            Type::FLOAT4 | Type::FLOAT8 => Value::Real(f64::from_pg(row, i)?),
            Type::BYTEA => Value::Blob(Vec::<u8>::from_pg(row, i)?),
            Type::INT8 | Type::INT4 | Type::INT2 | Type::OID | Type::BOOL => {
                Value::Integer(i64::from_pg(row, i)?)
            }
            _ => Value::Text(String::from_pg(row, i)?),
        })
    }
    fn from_value(v: &Value) -> Result<Self, String> {
        Ok(v.clone())
    }
}
