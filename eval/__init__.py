"""quarry.eval"""
