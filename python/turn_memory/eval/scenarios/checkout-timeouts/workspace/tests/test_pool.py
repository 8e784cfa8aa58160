import unittest

from shopfront.db.pool import ConnectionPool, PoolTimeout
from tests.fakes import FakeConnection


class PoolTest(unittest.TestCase):
    def test_acquire_beyond_size_times_out(self):
        pool = ConnectionPool(lambda: FakeConnection({}), size=1, acquire_timeout_ms=20)
        pool.acquire()
        with self.assertRaises(PoolTimeout):
            pool.acquire()

    def test_release_makes_a_connection_available_again(self):
        pool = ConnectionPool(lambda: FakeConnection({}), size=1, acquire_timeout_ms=20)
        conn = pool.acquire()
        pool.release(conn)
        self.assertEqual(pool.available(), 1)

    def test_context_manager_rolls_back_and_releases_on_error(self):
        pool = ConnectionPool(lambda: FakeConnection({}), size=1, acquire_timeout_ms=20)
        with self.assertRaises(ValueError):
            with pool.connection() as conn:
                raise ValueError("boom")
        self.assertTrue(conn.rolled_back)
        self.assertEqual(pool.available(), 1)


if __name__ == "__main__":
    unittest.main()
