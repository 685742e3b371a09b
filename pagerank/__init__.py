"""pagerank"""
