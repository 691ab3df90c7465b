"""quarry.serve"""
