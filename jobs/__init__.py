"""quarry.jobs"""
