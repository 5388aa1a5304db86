-- A payment's `seq` is the provider's trade number as text: providers send it as a
-- string, often longer than an integer column holds. SQLite cannot change a column's
-- type, so the table is built anew; rows already there keep their numbers as digits,
-- the text the shop now gives a number sent as `seq`, and so still meet their repeats.

CREATE TABLE payments_with_text_seq (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    source   TEXT    NOT NULL,
    seq      TEXT    NOT NULL CHECK (seq <> ''),
    order_id INTEGER NOT NULL REFERENCES orders (id),
    amount   INTEGER NOT NULL CHECK (amount > 0)
);
INSERT INTO payments_with_text_seq (id, source, seq, order_id, amount)
    SELECT id, source, CAST(seq AS TEXT), order_id, amount FROM payments;
DROP TABLE payments;
ALTER TABLE payments_with_text_seq RENAME TO payments;

-- One payment per provider delivery, whichever channel brought it.
CREATE UNIQUE INDEX payments_one_per_delivery ON payments (source, seq);
