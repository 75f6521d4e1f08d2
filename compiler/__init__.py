"""systolica.compiler"""
