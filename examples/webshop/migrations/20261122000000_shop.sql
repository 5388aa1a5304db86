-- The shop's tables. Where the domain says "once", a unique index says it too: the idem
-- guards keep duplicates from reaching the handlers, and the database refuses whatever
-- would slip past them (a record that expired, a store that failed open).

CREATE TABLE products (
    id    INTEGER PRIMARY KEY,
    name  TEXT    NOT NULL,
    price INTEGER NOT NULL CHECK (price >= 0)
);

CREATE TABLE orders (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    product_id INTEGER NOT NULL REFERENCES products (id),
    quantity   INTEGER NOT NULL CHECK (quantity > 0),
    client     TEXT    NOT NULL
);

-- One payment per provider delivery, whichever channel brought it.
CREATE TABLE payments (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    source   TEXT    NOT NULL,
    seq      INTEGER NOT NULL,
    order_id INTEGER NOT NULL REFERENCES orders (id),
    amount   INTEGER NOT NULL CHECK (amount > 0)
);
CREATE UNIQUE INDEX payments_one_per_delivery ON payments (source, seq);

CREATE TABLE tickets (
    id TEXT PRIMARY KEY
);

CREATE TABLE accounts (
    id      INTEGER PRIMARY KEY,
    balance INTEGER NOT NULL CHECK (balance >= 0)
);

-- One outcome per ticket: the withdrawal made, or the refusal for want of funds.
CREATE TABLE withdrawals (
    ticket_id  TEXT    PRIMARY KEY REFERENCES tickets (id),
    account_id INTEGER NOT NULL REFERENCES accounts (id),
    amount     INTEGER NOT NULL CHECK (amount > 0),
    balance    INTEGER NOT NULL,
    outcome    TEXT    NOT NULL CHECK (outcome IN ('withdrawn', 'insufficient_funds'))
);

CREATE TABLE vouchers (
    id    INTEGER PRIMARY KEY,
    stock INTEGER NOT NULL CHECK (stock >= 0),
    sold  INTEGER NOT NULL DEFAULT 0 CHECK (sold >= 0)
);

-- One voucher per user.
CREATE TABLE voucher_orders (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    voucher_id INTEGER NOT NULL REFERENCES vouchers (id),
    user_id    TEXT    NOT NULL
);
CREATE UNIQUE INDEX voucher_orders_one_per_user ON voucher_orders (voucher_id, user_id);

INSERT INTO products (id, name, price) VALUES
    (1, 'Espresso beans, 1 kg', 2400),
    (2, 'Pour-over kettle', 4900),
    (3, 'Hand grinder', 8900);
INSERT INTO accounts (id, balance) VALUES (1, 1000);
INSERT INTO vouchers (id, stock) VALUES (1, 100);
