"""The functions' text in claims.allocator.sql is what migrations 0004 and 0017 were written with: a
database migrated before and one migrated after must hold the same functions. A new version of a
function is a new constant and a new migration."""

import hashlib

from claims.allocator import sql

WRITTEN_WITH = {  # sha256 of each constant as its migration ran it
    "ALLOCATION_LOCK_0004": "3c5017bb9d5a613d542b4a33e76b45f39c1d5252794b387defd53f41e826cadc",
    "DROP_ALLOCATION_LOCK_0004": "c66d7d16ad79f0985ac057e8d099ed1855b80affba96d671c9ee7bcf5d8b6166",
    "PLACEMENT_FUNCTIONS_0017": "f805a7dab49afa13aacac5392631b68e90f149139d2c2f3e81503d07c268f800",
    "DROP_PLACEMENT_FUNCTIONS_0017": "1fe9be68c8294861ade8bda377b8a4f7adcc3d446cd67d83e90412767fc349d3",
}


def test_the_migrations_functions_are_the_text_they_were_written_with():
    assert {
        name: hashlib.sha256(getattr(sql, name).encode()).hexdigest() for name in WRITTEN_WITH
    } == WRITTEN_WITH
