-- CRM customer master (schema crm, owned by crm_app)
CREATE TABLE crm.customers (
    id              bigserial PRIMARY KEY,
    customer_no     text        NOT NULL UNIQUE,      -- the number printed on invoices
    given_name      text        NOT NULL,
    family_name     text        NOT NULL,
    street          text,
    postal_code     text,
    city            text,
    country         char(2)     NOT NULL,
    email           text,                             -- NULL allowed: not every customer has one
    balance_cents   bigint      NOT NULL DEFAULT 0,
    notes           text,
    source_updated  date,
    imported_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT email_shape CHECK (email IS NULL OR email ~ '^[^@\s;]+@[^@\s;]+\.[a-z]{2,}$'),
    CONSTRAINT country_iso CHECK (country ~ '^[A-Z]{2}$')
);
