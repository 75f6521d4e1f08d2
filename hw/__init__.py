"""systolica.hw"""
