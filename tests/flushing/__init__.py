"""A Django app of the test settings only: the ``flush`` that ends every transactional test."""
