-- Schema version 4: a key's budget (auth.keys[].budget, SPEC issue 17 §4).
ALTER TABLE keys ADD COLUMN budget_amount REAL NOT NULL DEFAULT 0;
ALTER TABLE keys ADD COLUMN budget_period TEXT NOT NULL DEFAULT '';
