"""quarry.core"""
